"""`specgate report`: Allure results to a single-file HTML report with the pinned Allure 3."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.resources
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from specgate.core import files
from specgate.core.errors import SpecgateError
from specgate.io import runs
from specgate.report import allure_meta, quality_gate

_T = TypeVar("_T")

MIN_NODE_MAJOR = 20
HISTORY_LIMIT = 100
ALLURE_HISTORY_FILE = "allure-history.jsonl"
# Allure's `generate` with the gate's outcome for the Quality Gates tab (its header says why).
GENERATE_SCRIPT = "generate.mjs"
_APPENDED_MARK = ".allure-appended"
_INSTALLED_MARK = ".specgate-installed"

# Allure 3 hard-codes Google Analytics into every report (analyticsEnable: true in each
# generator, no option to turn it off); a report built offline and mailed around must not
# phone home, so the two script tags are cut out of the generated HTML.
_ANALYTICS = re.compile(
    r"<script async src=\"https://www\.googletagmanager\.com/gtag/js[^\"]*\"></script>\s*"
    r"<script>\s*window\.dataLayer[\s\S]*?</script>"
)


class ReportError(SpecgateError):
    """The HTML report could not be built: Node.js missing, npm install failed, no results."""


@dataclasses.dataclass(frozen=True)
class BuiltReport:
    """Where the report went and what it took."""

    index: Path
    summary: dict[str, Any]
    install_s: float
    generate_s: float
    history_appended: bool


def allure_version() -> str:
    """The Allure Report version pinned in specgate/data/allure/package.json."""
    return str(_package_json()["dependencies"]["allure"])


def cache_dir() -> Path:
    """Where the pinned Allure is installed: $SPECGATE_NPM_CACHE, else the user cache dir."""
    override = os.environ.get("SPECGATE_NPM_CACHE")
    if override:
        return Path(override).expanduser() / f"allure-{allure_version()}"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specgate" / f"allure-{allure_version()}"


def find_node() -> tuple[Path, Path]:
    """node and npm on PATH, node new enough; ReportError saying what to install otherwise."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(n for n, p in (("node", node), ("npm", npm)) if p is None)
        raise ReportError(
            f"`specgate report` needs Node.js {MIN_NODE_MAJOR}+ with npm to run Allure Report "
            f"{allure_version()}, but {missing} is not on PATH. Install them (Debian/Ubuntu: "
            "`apt-get install -y nodejs npm`; or https://nodejs.org), then run it again. "
            "The results in allure-results/ and verdict.json do not need it."
        )
    try:
        out = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise ReportError(f"{node} --version failed ({exc}); check the Node.js install.") from exc
    match = re.match(r"v(\d+)\.", out)
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:
        raise ReportError(
            f"{node} is Node.js {out or '(no version)'}, but Allure Report {allure_version()} "
            f"needs Node.js {MIN_NODE_MAJOR} or newer. Put a newer node first on PATH."
        )
    return Path(node), Path(npm)


def ensure_allure(install_dir: Path | None = None) -> Path:
    """Install the pinned Allure with `npm ci` on first use; return its cli.js.

    Installs into a fresh folder and renames it into place, under a file lock, so two runs
    never see half an install. Later calls need no network.
    """
    target = install_dir or cache_dir()
    cli = target / "node_modules" / "allure" / "cli.js"
    stamp = _lock_digest()
    if _installed(target, stamp):
        return cli
    _, npm = find_node()
    target.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock  # a dependency, but only `report` needs it

    with FileLock(str(target) + ".lock", timeout=900):
        if _installed(target, stamp):
            return cli
        staging = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            data = _data_dir()
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(data / name, staging / name)
            proc = subprocess.run(
                [str(npm), "ci", "--ignore-scripts", "--no-audit", "--no-fund",
                 "--omit=dev", "--loglevel=error"],
                cwd=staging, capture_output=True, text=True, timeout=900, check=False,
                env={**os.environ, "NO_UPDATE_NOTIFIER": "1"},
            )
            if proc.returncode != 0:
                tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
                raise ReportError(
                    f"`npm ci` for Allure Report {allure_version()} failed in {staging} "
                    f"(exit {proc.returncode}). It needs the npm registry once; offline, set "
                    "SPECGATE_NPM_CACHE to a folder where it was installed before.\n" + tail
                )
            (staging / _INSTALLED_MARK).write_text(stamp + "\n", encoding="utf-8")
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return cli


def allure_config(output: Path, history: Path, *, name: str) -> dict[str, Any]:
    """The Allure 3 config: one single-file awesome report, categories, JSONL history."""
    return {
        "name": name,
        "output": str(output),
        "historyPath": str(history),
        "historyLimit": HISTORY_LIMIT,
        "plugins": {
            "awesome": {
                "options": {
                    "singleFile": True,
                    "reportName": name,
                    "groupBy": ["epic", "feature"],
                    "reportLanguage": "en",
                }
            }
        },
        "categories": allure_meta.awesome_categories(),
    }


def build_report(reports_dir: Path, *, name: str | None = None) -> Path:
    """DIR/allure-results to DIR/allure-report/index.html; returns the index.html path."""
    return build(reports_dir, name=name).index


def build(reports_dir: Path, *, name: str | None = None) -> BuiltReport:
    """build_report with the summary and timings, for callers and tests that want them.

    DIR is a reports folder (its published allure-results: the latest finished run's) or one
    run's folder under DIR/runs/; the history is the reports folder's either way."""
    reports_dir = Path(reports_dir).resolve()
    _refuse_an_earlier_run(reports_dir)
    published = reports_dir / "allure-results"
    if not (published.is_dir() and any(published.glob("*-result.json"))):
        raise ReportError(
            f"no Allure results in {published}: run the claims first, e.g. "
            f"`pytest -m probe --reports {reports_dir}`, then `specgate report --reports "
            f"{reports_dir}`."
        )
    node, _ = find_node()
    started = time.monotonic()
    cli = ensure_allure()
    install_s = time.monotonic() - started

    with _scratch(reports_dir) as copy:
        # A run that finishes meanwhile swaps in its own results: build from a copy taken
        # while no run was publishing, so the report is one run's.
        results, run_id = runs.snapshot(reports_dir, "allure-results", copy)
        verdict = _verdict_path(reports_dir, run_id)
        return _build(reports_dir, results or published, node, cli, install_s,
                      name or _report_name(reports_dir, run_id), verdict)


def _refuse_an_earlier_run(reports_dir: Path) -> None:
    """The last pytest run on a reports folder stopped before it started: the report of the
    run before it would pass for the last run's."""
    note = runs.not_started(reports_dir)
    if note is None or runs.reports_root(reports_dir) != reports_dir:
        return
    command = " ".join(["pytest", *(str(a) for a in note.get("args") or [])])
    earlier = note.get("earlier_run")
    instead = (f"; the report of the run before it, {earlier}, is built with `specgate report "
               f"--reports {reports_dir / runs.RUNS_DIR / str(earlier)}`" if earlier else "")
    raise ReportError(
        f"the last pytest run on {reports_dir}, `{command}` (at {note.get('at', '?')}), "
        f"stopped before any claim ran and wrote no verdict, as pytest's output said "
        f"({reports_dir / runs.NOT_STARTED_FILE} records it){instead}")


def _build(reports_dir: Path, results: Path, node: Path, cli: Path, install_s: float,
           name: str, verdict: Path) -> BuiltReport:
    result_files = sorted(results.glob("*-result.json"))
    if not (results / "categories.json").exists():
        allure_meta.write_categories(results)
    if not (results / "executor.json").exists():
        allure_meta.write_executor(results)

    history_dir = runs.reports_root(reports_dir) / "history"
    history_dir.mkdir(parents=True, exist_ok=True)
    history = history_dir / ALLURE_HISTORY_FILE
    if history.exists() or history.is_symlink():
        # Allure reads it too: a named pipe there would hold its generate step.
        _checked(history, lambda: files.check_regular(history, limit=files.LOG_BYTES))
    fingerprint = _fingerprint(result_files)
    mark = history_dir / _APPENDED_MARK
    earlier = _appended_before(mark, fingerprint)
    append = earlier is None

    final = reports_dir / "allure-report"
    with _scratch(reports_dir) as scratch:
        if earlier is not None:
            # Rebuilding the report of a run already in the history: Allure 3.14 ignores
            # appendHistory, so it gets a copy of the lines from before that run instead.
            lines = _read_text(history, files.LOG_BYTES).splitlines(keepends=True)
            history = scratch / ALLURE_HISTORY_FILE
            history.write_text("".join(lines[:earlier]), encoding="utf-8")
        output = scratch / "allure-report"
        config = scratch / "allurerc.json"
        doc = allure_config(output, history, name=name)
        config.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
        gate = scratch / "quality-gate-rules.json"
        verdict_doc = _verdict_doc(verdict)
        rules = quality_gate.gate_rules(verdict_doc, verdict)
        gate.write_text(json.dumps({"rules": [r.to_json() for r in rules]}, indent=2,
                                   ensure_ascii=False), encoding="utf-8")
        started = time.monotonic()
        proc = subprocess.run(
            [str(node), str(generate_script()), str(cli), str(results), str(config), str(gate)],
            cwd=scratch, capture_output=True, text=True, timeout=600, check=False,
            env={**os.environ, "NO_COLOR": "1"},
        )
        generate_s = time.monotonic() - started
        index = output / "index.html"
        if proc.returncode != 0 or not index.exists():
            tail = "\n".join((proc.stderr + proc.stdout).strip().splitlines()[-20:])
            raise ReportError(
                f"Allure Report {allure_version()} could not build the report from {results} "
                f"(exit {proc.returncode}); its output ends with:\n{tail}"
            )
        for html in output.rglob("*.html"):
            strip_analytics(html)
            show_descriptions(html)
            wrap_errors(html)
            note_passed_gate(html, quality_gate.passed_note(verdict_doc))
        if final.exists():
            shutil.rmtree(final)
        output.rename(final)
    if append:
        # Counted after Allure trimmed the file to HISTORY_LIMIT: this run is its last line.
        mark.write_text(f"{fingerprint} {max(_count_lines(history) - 1, 0)}\n", encoding="utf-8")
    summary_path = final / "summary.json"
    summary: dict[str, Any] = {}
    if summary_path.exists() or summary_path.is_symlink():
        found = _checked(summary_path,
                         lambda: files.read_json(summary_path, limit=files.CONFIG_BYTES))
        summary = found if isinstance(found, dict) else {}
    ring_without_skips(final / "index.html", summary.get("stats") or {})
    return BuiltReport(final / "index.html", summary, install_s, generate_s, append)


def summary_line(summary: Mapping[str, Any]) -> str:
    """One line for a terminal or CI log out of the report's summary.json."""
    stats = summary.get("stats") or {}
    parts = [f"{stats[k]} {k}" for k in ("passed", "failed", "broken", "skipped") if stats.get(k)]
    return f"{stats.get('total', 0)} claims: " + (", ".join(parts) or "none ran")


# Allure 3's awesome report shows a test's description in a sandboxed frame that it sizes by
# reading the frame's document; opened from disk (file://, an opaque origin) the page may not
# read it, the frame stays 0 px tall and every description looks empty. A minimum height (the
# reader can drag it taller) keeps them visible however the report is opened.
_DESCRIPTION_FRAME_CSS = (
    '<style data-specgate="description-frame">'
    'iframe[data-testid="test-result-description-frame"]'
    "{min-height:9em;resize:vertical}</style>"
)


def show_descriptions(html: Path) -> bool:
    """Give Allure's description frames a visible height; True if the page was changed."""
    text = html.read_text(encoding="utf-8")
    if _DESCRIPTION_FRAME_CSS in text or "</head>" not in text:
        return False
    html.write_text(text.replace("</head>", _DESCRIPTION_FRAME_CSS + "</head>", 1),
                    encoding="utf-8")
    return True


# A broken claim's cause is a long line or several (a path, a server log's last lines): Allure
# shows error messages and traces in boxes that clip what is wider; they wrap instead.
_WRAPPED_ERRORS_CSS = (
    '<style data-specgate="error-wrap">'
    '[data-testid="test-result-error-message"] pre,'
    '[data-testid="test-result-error-trace"] pre'
    "{white-space:pre-wrap;overflow-wrap:anywhere}</style>"
)


def wrap_errors(html: Path) -> bool:
    """Wrap the text of Allure's error boxes; True if the page was changed."""
    return _add_style(html, _WRAPPED_ERRORS_CSS)


# The ring in the report's header shows passed ÷ all tests, so a claim skipped because the
# profile does not ask for it (no reference drafter, no eval data) lowers it as a failure would.
# specgate's score is passed ÷ the claims judged: the ring says that number instead.
_RING = 'article[aria-label="Success rate"]>b'


def ring_score(stats: Mapping[str, Any]) -> str | None:
    """passed ÷ the claims judged (every one not skipped), as the ring writes a percentage;
    None when the stats are not a report's."""
    try:
        passed, total = int(stats.get("passed") or 0), int(stats.get("total") or 0)
        judged = total - int(stats.get("skipped") or 0)
    except (TypeError, ValueError):
        return None
    if total <= 0:
        return None
    if judged <= 0:
        return "n/a"
    score = math.floor(passed / judged * 10000) / 100
    return f"{score:g}%" if score else "0"


def ring_without_skips(html: Path, stats: Mapping[str, Any]) -> bool:
    """Make the header ring show ring_score; True if the page was changed."""
    score = ring_score(stats)
    if score is None or not html.is_file():
        return False
    return _add_style(html, (
        f'<style data-specgate="ring">{_RING}{{visibility:hidden;position:relative}}'
        f'{_RING}::after{{content:"{score}";visibility:visible;position:absolute;left:0;'
        "right:0;text-align:center}</style>"))


# Allure 3.14 lists only the quality-gate rules that failed: for a passed verdict the Quality
# Gates tab says "No quality gate results available". The tab's empty state (the one element
# without children beside its row of tabs, while that tab is the current one) says the outcome.
_EMPTY_GATE_TAB = ('div:has(>div>[data-testid="nav-tab-qualityGate"][aria-current="true"])'
                   "+div>div:only-child:not(:has(*))")


def note_passed_gate(html: Path, note: str | None) -> bool:
    """Add `note` below the Quality Gates tab's empty state; True if the page was changed."""
    if not note:
        return False
    text = (note.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
            .replace("<", "\\3c "))
    return _add_style(html, (
        f'<style data-specgate="quality-gate">{_EMPTY_GATE_TAB}{{display:block}}'
        f'{_EMPTY_GATE_TAB}::after{{content:"{text}";display:block;margin-top:1em}}</style>'))


def _add_style(html: Path, style: str) -> bool:
    text = html.read_text(encoding="utf-8")
    if style in text or "</head>" not in text:
        return False
    html.write_text(text.replace("</head>", style + "</head>", 1), encoding="utf-8")
    return True


def strip_analytics(html: Path) -> bool:
    """Remove Allure's Google Analytics tags from a generated page; True if there were any."""
    text = html.read_text(encoding="utf-8")
    cleaned, count = _ANALYTICS.subn("", text)
    if count:
        html.write_text(cleaned, encoding="utf-8")
    return count > 0


def _report_name(reports_dir: Path, run_id: str | None = None) -> str:
    """The title, from the verdict of the run whose results the report shows."""
    doc = _verdict_doc(_verdict_path(reports_dir, run_id))
    if doc is not None and doc.get("profile"):
        # The title is on the first screen: simulated figures say so there.
        sim = " (simulated server)" if doc.get("simulated") else ""
        return f"specgate — {doc['profile']}{sim}"
    return "specgate"


def _verdict_path(reports_dir: Path, run_id: str | None) -> Path:
    """The verdict of the run whose results the report shows: its run folder's, where it has
    one (the published verdict.json may be a later run's interim one)."""
    if run_id and (reports_dir / runs.RUNS_DIR / run_id / "verdict.json").is_file():
        return reports_dir / runs.RUNS_DIR / run_id / "verdict.json"
    return reports_dir / "verdict.json"


def _verdict_doc(verdict: Path) -> dict[str, Any] | None:
    """The verdict as a dict; None where there is none or it is not JSON."""
    text = _read_if_there(verdict, files.LOG_BYTES)
    with contextlib.suppress(ValueError):
        doc = files.loads_json(text) if text is not None else None
        return doc if isinstance(doc, dict) else None
    return None


def _appended_before(mark: Path, fingerprint: str) -> int | None:
    """History lines from before this run, if this run's results were appended already."""
    text = _read_if_there(mark, files.CONFIG_BYTES)
    if text is None:
        return None
    with contextlib.suppress(ValueError):
        seen, before = text.split()
        if seen == fingerprint:
            return int(before)
    return None


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0

    def count() -> int:
        with files.open_regular(path, limit=files.LOG_BYTES) as fh:
            return sum(1 for _ in fh)

    return _checked(path, count)


def _checked(path: Path, read: Callable[[], _T]) -> _T:
    """read() of a file in the reports folder; ReportError naming the file when it is not a
    regular file within its bound (a named pipe, a folder), cannot be read, or does not hold
    what it should."""
    try:
        return read()
    except OSError as exc:
        raise ReportError(_unreadable(path, exc)) from exc
    except ValueError as exc:  # not UTF-8, not JSON, JSON nested too deeply
        raise ReportError(f"{path}: not readable as specgate writes it ({exc})") from exc


def _read_text(path: Path, limit: int) -> str:
    return _checked(path, lambda: files.read_text(path, limit=limit))


def _read_if_there(path: Path, limit: int) -> str | None:
    """The text of a file the report can do without: None when there is none or it is not
    UTF-8; ReportError naming it when something other than a regular file is in its place."""
    try:
        return files.read_text(path, limit=limit)
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    except OSError as exc:
        raise ReportError(_unreadable(path, exc)) from exc


def _unreadable(path: Path, exc: OSError) -> str:
    return f"{path}: {exc.strerror or exc}; move it aside and build the report again"


def _fingerprint(result_files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in result_files:
        digest.update(path.name.encode())
    return digest.hexdigest()


@contextlib.contextmanager
def _scratch(reports_dir: Path) -> Iterator[Path]:
    # Beside the final report, so the last step is a rename on one file system.
    path = Path(tempfile.mkdtemp(prefix=".report-", dir=reports_dir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _installed(target: Path, stamp: str) -> bool:
    mark = target / _INSTALLED_MARK
    cli = target / "node_modules" / "allure" / "cli.js"
    return cli.exists() and mark.exists() and mark.read_text(encoding="utf-8").strip() == stamp


def _lock_digest() -> str:
    return hashlib.sha256((_data_dir() / "package-lock.json").read_bytes()).hexdigest()


def _package_json() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((_data_dir() / "package.json").read_text(encoding="utf-8"))
    return doc


def generate_script() -> Path:
    """The script that runs the pinned Allure's report generation with the gate's outcome."""
    return _data_dir() / GENERATE_SCRIPT


def _data_dir() -> Path:
    data = Path(str(importlib.resources.files("specgate"))) / "data" / "allure"
    if not ((data / "package-lock.json").exists() and (data / GENERATE_SCRIPT).exists()):
        raise ReportError(
            f"{data}: package.json, package-lock.json and {GENERATE_SCRIPT} of the pinned "
            "Allure Report are missing, so this specgate was packaged without them; reinstall "
            "specgate from a checkout (`pip install -e .`) or a wheel that includes "
            "specgate/data/allure/."
        )
    return data
