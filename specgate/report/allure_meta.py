"""Files beside the Allure results: environment, executor and failure categories."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgate.claims.figures import Figure, decidable_line, figures_of, latency_lines
from specgate.claims.result import ClaimResult
from specgate.core.redact import redact_urls

if TYPE_CHECKING:
    from specgate.core.profile import Profile

# Values of keys like these never reach a report, whoever passes them in: an API key or token
# shown in the Allure environment or an attachment would leak to everyone the report is sent to.
_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|authorization)", re.IGNORECASE)
REDACTED = "<redacted>"


@dataclasses.dataclass(frozen=True)
class Category:
    """One failure category; the same rule feeds categories.json and the Allure 3 config."""

    name: str
    description: str
    statuses: tuple[str, ...]
    claims: str | None = None  # regex over the claim id (the Allure story label)
    message: str | None = None  # regex searched in the status message
    trace: str | None = None  # regex searched in the trace (Allure 3 config only)
    exclude_message: str | None = None  # messages matching this never land here


# Broken claims whose message says the server, or a request to it, went wrong (the wording of
# ServerError in client.py and of Failure.text() in live.py).
_SERVER_TROUBLE = (
    r"ServerError|SGLang|sglang|server log|measurement could not be made"
    r"|[Ss]erver (?:died|exited|did not|is not|not ready|refused|reported|aborted"
    r"|could not be reached)"
    r"|[Cc]onnection (?:refused|reset|aborted|failed)|(?:GET|POST) https?://|/health"
)

CATEGORIES: tuple[Category, ...] = (
    Category(
        "Checkpoint incompatible",
        "The drafter checkpoint does not fit the target or the reference: config fields, tensor "
        "shapes or vocabulary maps disagree. Fix or convert the checkpoint before serving it.",
        ("failed",),
        claims=r"(?:config|weights|vocab)\.[\w.-]+|finetune\.(?:init_parity|vocab_alignment)",
    ),
    Category(
        "Below break-even",
        "The drafter is accepted too rarely to pay for its verify step: speculative decoding is "
        "slower than (or not clearly faster than) plain decoding.",
        ("failed",),
        claims=r"spec\.[\w.-]+",
    ),
    Category(
        "Offline prediction off",
        "The accept length the teacher-forced evaluation predicts for the served chain lies "
        "outside the measured interval widened by [eval] tolerance: the offline evaluation "
        "does not predict this deployment (see eval.live_agreement's message for which way).",
        ("failed",),
        claims=r"eval\.live_agreement",
    ),
    Category(
        "Regressed since last pass",
        "A key figure dropped by more than its measured noise against the last passing run of "
        "the same profile (reports/history/verdicts.jsonl).",
        ("failed",),
        claims=r"regress\.[\w.-]+",
    ),
    Category(
        "Server failed",
        "The SGLang server could not be launched, did not get ready, died, or answered wrongly; "
        "the claims behind it could not be evaluated. See the server log attachment.",
        ("broken",),
        message=_SERVER_TROUBLE,
        trace=r"ServerError",
    ),
    Category(
        "Harness error",
        "specgate could not evaluate a claim for another reason (bad input file, missing data, "
        "a bug in the harness). The message names the file or key.",
        ("broken",),
        exclude_message=_SERVER_TROUBLE,
    ),
)


def status_message(result: ClaimResult) -> str:
    """The message a failed or broken claim shows in Allure: its id first, so categories match."""
    return f"{result.id}: {result.message}"


def message_regex(category: Category) -> str:
    """A categories.json messageRegex that matches whole messages in Allure 2 and Allure 3.

    Allure 2 (Java) needs the regex to match the whole message, Allure 3 only searches it, and
    JavaScript has no inline (?s) flag: hence anchors and [\\s\\S] instead of a dot.
    allure-pytest prefixes the message with the exception name ("Failed: ", "KeyError: ").
    """
    if category.claims is not None:
        return rf"^(?:[\w.]+: )?(?:{category.claims}): [\s\S]*$"
    if category.message is not None:
        return rf"^[\s\S]*(?:{category.message})[\s\S]*$"
    if category.exclude_message is not None:
        return rf"^(?![\s\S]*(?:{category.exclude_message}))[\s\S]*$"
    return r"^[\s\S]*$"


def categories_json() -> list[dict[str, Any]]:
    """categories.json content, read by Allure 2 and by Allure 3's allure2 plugin."""
    return [
        {
            "name": c.name,
            "description": c.description,
            "matchedStatuses": list(c.statuses),
            "messageRegex": message_regex(c),
        }
        for c in CATEGORIES
    ]


def awesome_categories() -> list[dict[str, Any]]:
    """The `categories` key of an Allure 3 config, used by the awesome report.

    Allure 3's classic plugin never matches messageRegex (it passes the wrong field names), and
    awesome ignores categories.json altogether, so the report is driven by this instead. A
    category matches when any of its matchers does; the first category that matches wins.
    """
    out: list[dict[str, Any]] = []
    for c in CATEGORIES:
        statuses = list(c.statuses)
        matchers: list[dict[str, Any]] = []
        if c.claims is not None:
            matchers.append({"statuses": statuses, "labels": {"story": rf"^(?:{c.claims})$"}})
            matchers.append({"statuses": statuses, "message": message_regex(c)})
        if c.message is not None:
            matchers.append({"statuses": statuses, "message": c.message})
        if c.trace is not None:
            matchers.append({"statuses": statuses, "trace": c.trace})
        if not matchers:
            # Earlier categories have taken everything they match: the rest falls here.
            matchers.append({"statuses": statuses})
        out.append({"name": c.name, "matchers": matchers, "expand": False})
    return out


def write_categories(results_dir: Path) -> Path:
    """Write categories.json into the Allure results directory."""
    return _write_json(Path(results_dir) / "categories.json", categories_json())


def detect_environment() -> dict[str, str]:
    """What this machine can tell about itself: versions, and GPUs when nvidia-smi exists."""
    info: dict[str, str] = {
        "specgate.version": _dist_version("specgate") or "unknown",
        "python.version": platform.python_version(),
        "host.os": f"{platform.system()} {platform.release()}",
    }
    torch_version = _dist_version("torch")  # from metadata: importing torch takes seconds
    if torch_version:
        info["torch.version"] = torch_version
    info.update(_gpu_info())
    return info


def write_environment(
    results_dir: Path, info: Mapping[str, object], *, detect: bool = True,
    lead: Mapping[str, object] | None = None,
) -> Path:
    """Write environment.properties: what the caller knows, over what the machine reports.

    Keys the caller should give: profile, drafter, reference_drafter, target, server
    ("simulated" or "real"), sglang.version (from the server), server.url. None values are
    left out; values of secret-looking keys are redacted. `lead` comes first, before what the
    machine reports: Allure's overview shows the first few entries without a click.
    """
    merged: dict[str, str] = {}
    for source in (lead or {}, detect_environment() if detect else {}, info):
        for key, value in source.items():
            if value is None:
                continue
            # A key given twice keeps its first place and takes the later value.
            merged[str(key)] = (REDACTED if _SECRET_KEY.search(str(key))
                                else redact_urls(_as_text(value)))
    lines = [f"{_prop_escape(k, key=True)}={_prop_escape(v)}" for k, v in merged.items()]
    path = Path(results_dir) / "environment.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="ascii")
    return path


def executor_info(
    env: Mapping[str, str] | None = None, *, report_name: str | None = None
) -> dict[str, Any]:
    """executor.json content: specgate, plus the CI build's name and link when there is one."""
    env = os.environ if env is None else env
    doc: dict[str, Any] = {"name": "specgate", "type": "specgate"}
    if report_name:
        doc["reportName"] = report_name
    build = _ci_build(env)
    if build:
        doc.update(build)
    return doc


def write_executor(
    results_dir: Path, *, env: Mapping[str, str] | None = None, report_name: str | None = None
) -> Path:
    """Write executor.json into the Allure results directory."""
    return _write_json(
        Path(results_dir) / "executor.json", executor_info(env, report_name=report_name)
    )


def write_all(
    results_dir: Path, profile: Profile | None, verdict_doc: Mapping[str, Any]
) -> None:
    """After a run: categories.json, executor.json and environment.properties from its verdict.

    sglang.version and server.url are taken from the verdict when the run put them there.
    """
    results_dir = Path(results_dir)
    write_categories(results_dir)
    tidy_claim_results(results_dir)
    name = profile.name if profile else str(verdict_doc.get("profile") or "")
    write_executor(results_dir, report_name=f"specgate — {name}" if name else "specgate")
    simulated = verdict_doc.get("simulated")
    info: dict[str, object] = {
        "profile": name or None,
        "profile.file": profile.source if profile else None,
        "drafter": verdict_doc.get("drafter"),
        "reference_drafter": verdict_doc.get("reference"),
        "target": verdict_doc.get("target"),
        "server": None if simulated is None else ("simulated" if simulated else "real"),
        "sglang.version": verdict_doc.get("sglang_version"),
        "server.url": verdict_doc.get("server_url"),
        "outcome": verdict_doc.get("outcome"),
        "selection": verdict_doc.get("selection"),
        "warning": "; ".join(verdict_doc.get("warnings") or []) or None,
    }
    if profile is not None:
        spec = profile.speculative
        info["speculative"] = " ".join(
            f"{k}={v}" for k, v in (("algorithm", spec.algorithm), ("num_steps", spec.num_steps),
                                    ("eagle_topk", spec.eagle_topk),
                                    ("num_draft_tokens", spec.num_draft_tokens))
            if v is not None
        )
        info["server.tp"] = profile.server.tp
    # The outcome and the key figures lead: the overview page shows them without a click.
    lead: dict[str, object] = {"outcome": verdict_doc.get("outcome")}
    figures = figures_of(verdict_doc)
    lead.update({figure_key(f): f.short_text() for f in figures})
    # TTFT and TPOT as sglang.bench_serving reports them, per server and their ratio.
    lead.update(dict(latency_lines(verdict_doc.get("latency"))))
    could = decidable_line(verdict_doc.get("decidable"))
    if could is not None:
        lead["decidable speed-up"] = could[1]
    levels = sorted({f.confidence for f in figures if f.confidence and f.ci_low is not None})
    if levels:
        lead["intervals"] = " / ".join(f"{level * 100:.4g} % confidence" for level in levels)
    write_environment(results_dir, info, lead=lead)


def figure_key(figure: Figure) -> str:
    """A key figure's name in environment.properties: `baseline tok/s`, `speed-up`, …"""
    return {"baseline_tps": "baseline tok/s"}.get(figure.key, figure.label)


# allure-pytest writes an exception's qualified name before its text ("Failed: ",
# "specgate.plugin.guard.ClaimBroken: "); a claim's own words start with its lower-case id.
_EXCEPTION_PREFIX = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*: ")


def tidy_claim_results(results_dir: Path) -> None:
    """Each claim's Allure result as a reader wants it: the status message as the plain
    sentence (without the exception's module path and class), and a description on every
    claim, also on those the harness broke before the claim could write one."""
    for path in sorted(Path(results_dir).glob("*-result.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or not any(
                isinstance(label, dict) and label.get("name") == "claim"
                for label in doc.get("labels") or []):
            continue
        details = doc.get("statusDetails")
        message = details.get("message") if isinstance(details, dict) else None
        changed = False
        if (isinstance(details, dict) and isinstance(message, str)
                and _EXCEPTION_PREFIX.match(message)):
            message = _EXCEPTION_PREFIX.sub("", message, count=1)
            details["message"] = message
            changed = True
        if not doc.get("description") and not doc.get("descriptionHtml") and message:
            doc["description"] = message
            changed = True
        if changed:
            tmp = path.with_name(path.name + ".tmp")
            # ASCII with escapes: a lone surrogate from a non-UTF-8 name stays valid JSON.
            tmp.write_text(json.dumps(doc, ensure_ascii=True), encoding="ascii")
            os.replace(tmp, path)


def _ci_build(env: Mapping[str, str]) -> dict[str, Any]:
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_RUN_ID"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        run_url = f"{server}/{env.get('GITHUB_REPOSITORY', '')}/actions/runs/{env['GITHUB_RUN_ID']}"
        return _build(
            "github",
            f"{env.get('GITHUB_WORKFLOW', 'workflow')} #{env.get('GITHUB_RUN_NUMBER', '')}",
            run_url,
            env.get("GITHUB_RUN_NUMBER"),
        )
    if env.get("GITLAB_CI") and env.get("CI_JOB_URL"):
        return _build(
            "gitlab",
            f"{env.get('CI_JOB_NAME', 'job')} #{env.get('CI_PIPELINE_IID', '')}",
            env["CI_JOB_URL"],
            env.get("CI_PIPELINE_IID"),
        )
    if env.get("BUILD_URL") and env.get("JENKINS_URL"):
        return _build(
            "jenkins",
            env.get("BUILD_TAG") or f"{env.get('JOB_NAME', 'job')} #{env.get('BUILD_NUMBER', '')}",
            env["BUILD_URL"],
            env.get("BUILD_NUMBER"),
        )
    if env.get("BUILDKITE_BUILD_URL"):
        number = env.get("BUILDKITE_BUILD_NUMBER")
        pipeline = env.get("BUILDKITE_PIPELINE_SLUG", "pipeline")
        return _build("buildkite", f"{pipeline} #{number or ''}", env["BUILDKITE_BUILD_URL"],
                      number)
    return {}


def _build(kind: str, name: str, url: str, order: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "buildName": name.strip(" #"), "buildUrl": url}
    if order and order.isdigit():
        out["buildOrder"] = int(order)
    return out


def _gpu_info() -> dict[str, str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {"gpu": "nvidia-smi did not answer"}
    rows = [r.split(",") for r in proc.stdout.splitlines() if r.strip()]
    if proc.returncode != 0 or not rows:
        return {"gpu": f"nvidia-smi exited {proc.returncode}"}
    names = [r[0].strip() for r in rows]
    drivers = sorted({r[1].strip() for r in rows if len(r) > 1})
    counted = {n: names.count(n) for n in dict.fromkeys(names)}
    return {
        "gpu": ", ".join(f"{k} x{v}" if v > 1 else k for k, v in counted.items()),
        "gpu.driver": ", ".join(drivers),
    }


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _as_text(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


def _prop_escape(text: str, *, key: bool = False) -> str:
    """Java .properties escaping, ASCII only, so Allure 2 (Latin-1) and Allure 3 read the same."""
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch in "=:" or (ch in "#!" and i == 0) or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            data = ch.encode("utf-16-be")
            out.extend(f"\\u{data[j]:02x}{data[j + 1]:02x}" for j in range(0, len(data), 2))
        else:
            out.append(ch)
    return "".join(out)


def _write_json(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = redact_urls(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n"
    # A lone surrogate (a name that was not UTF-8 on disk) becomes the JSON escape \udcNN.
    path.write_bytes(text.encode("utf-8", "backslashreplace"))
    return path


def write_lost_result(results_dir: Path, *, claim_id: str, phase: str, family: str,
                      name: str, full_name: str, message: str) -> Path:
    """An Allure result for a test whose own process died before it could write one.

    allure-pytest records results inside xdist workers only, so a worker that crashes takes its
    current test's result with it; the controller writes this stand-in, status broken.
    """
    import time
    import uuid

    from specgate.claims.result import PHASE_TITLES

    now = int(time.time() * 1000)
    doc = {
        "uuid": str(uuid.uuid4()),
        "historyId": hashlib.md5(full_name.encode()).hexdigest(),
        "name": claim_id,
        "fullName": full_name,
        "status": "broken",
        "statusDetails": {"message": message},
        "stage": "finished",
        "start": now,
        "stop": now,
        "labels": [
            {"name": "epic", "value": PHASE_TITLES.get(phase, phase)},
            {"name": "feature", "value": family},
            {"name": "story", "value": claim_id},
            {"name": "claim", "value": claim_id},
            {"name": "framework", "value": "specgate"},
        ],
        "parameters": [],
        "attachments": [],
        "description": f"{name}: {message}",
    }
    results_dir.mkdir(parents=True, exist_ok=True)
    return _write_json(results_dir / f"{doc['uuid']}-result.json", doc)
