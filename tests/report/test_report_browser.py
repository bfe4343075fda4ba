"""The built report, opened offline in headless Chromium: phases and counts show, screenshot."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from allure_support import make_results

from specgate.report import allure_meta
from specgate.report import build as report

# CHROMIUM_PATH (tox passes it through) wins over whatever is on PATH.
CHROMIUM = os.environ.get("CHROMIUM_PATH") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)

pytestmark = [
    pytest.mark.slow,
    # Its tests share the built report: one xdist worker runs them all (tests/conftest.py).
    pytest.mark.xdist_group("test_report_browser"),
    pytest.mark.skipif(CHROMIUM is None,
                       reason="no chromium on PATH and no CHROMIUM_PATH "
                              "(Debian: apt-get install -y chromium)"),
    pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                       reason="node and npm are needed to build the report"),
]

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--window-size=1400,1000",
    # Every host name fails to resolve: the mailed report must work with no network at all.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    # Let the single-page app load its embedded data and render before the dump or the shot.
    "--virtual-time-budget=20000",
]


def _chromium(profile_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", *args],
        capture_output=True, text=True, timeout=180, check=False,
    )


def _visible_text(dom: str) -> str:
    body = dom[dom.find('<div id="app"'):]
    body = re.sub(r"<script[\s\S]*?</script>", " ", body)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    reports = root / "reports"
    results = make_results(root / "run", reports / "allure-results")
    allure_meta.write_environment(results, {"profile": "demo", "server": "simulated"})
    return report.build_report(reports)


def test_phases_and_counts_show(built: Path, tmp_path: Path) -> None:
    proc = _chromium(tmp_path / "chrome", "--dump-dom", built.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = _visible_text(proc.stdout)
    assert "Phase 0 — quick probe" in text
    assert "Phase 1 — fine-tune" in text
    assert re.search(r"Failed 2 Broken 2 Passed 1 Skipped 1", text), text[:1500]
    assert "Categories 4" in text  # the four categories that caught a result
    for claim_id in ("vocab.d2t_match", "spec.breakeven", "perf.baseline_tps"):
        assert claim_id in text


def test_screenshot(built: Path, tmp_path: Path) -> None:
    out_dir = Path(os.environ.get("SPECGATE_SCREENSHOT_DIR") or tmp_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    shot = out_dir / "allure-report.png"
    proc = _chromium(tmp_path / "chrome", f"--screenshot={shot}", built.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # A blank or error page of 1400x1000 compresses to a few kB; the rendered report is ~80 kB.
    assert len(data) > 30_000


FIGURES = {  # as verdict.json carries them (specgate.claims.figures)
    "baseline_tps": {"label": "baseline", "claim": "perf.baseline_tps", "value": 817.43,
                     "unit": "tok/s", "ci_low": 810.40, "ci_high": 824.47, "confidence": 0.95},
    "accept_len": {"label": "accept length", "claim": "spec.accept_len", "value": 2.5449,
                   "unit": "tokens/verify", "ci_low": 2.4871, "ci_high": 2.6027,
                   "confidence": 0.95},
    "breakeven": {"label": "break-even", "claim": "spec.breakeven", "value": 1.6153,
                  "unit": "tokens/verify", "ci_low": 1.5596, "ci_high": 1.6756,
                  "confidence": 0.95},
    "speedup": {"label": "speed-up", "claim": "spec.speedup", "value": 1.5595, "unit": "x",
                "ci_low": 1.5036, "ci_high": 1.6154, "confidence": 0.95},
}


@pytest.fixture(scope="module")
def built_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of a run whose verdict carries the key figures, as a claims run leaves it."""
    root = tmp_path_factory.mktemp("figures")
    reports = root / "reports"
    results = make_results(root / "run", reports / "allure-results")
    allure_meta.write_all(results, None, {"profile": "demo", "simulated": True,
                                          "outcome": "passed", "figures": FIGURES})
    return report.build_report(reports)


def test_the_overview_leads_with_the_key_figures(built_run: Path, tmp_path: Path) -> None:
    proc = _chromium(tmp_path / "chrome", "--dump-dom", built_run.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = _visible_text(proc.stdout)
    # Shown before "Show more": the overview's first entries, no click needed.
    shown = text[:text.index("Show more")]
    for line in ("outcome passed", "baseline tok/s 817.4 tok/s [810.4, 824.5]",
                 "accept length 2.545 [2.487, 2.603]", "break-even 1.615 [1.560, 1.676]",
                 "speed-up 1.560× [1.504, 1.615]", "intervals 95 % confidence"):
        assert line in shown, shown[:2000]


def test_descriptions_have_room_when_the_report_is_opened_from_disk(built_run: Path,
                                                                    tmp_path: Path) -> None:
    """Allure sizes its description frame from the frame's document, which a page opened from
    file:// may not read: the frame would stay 0 px tall. The report gives it a height."""
    page = built_run.read_text(encoding="utf-8")
    assert 'iframe[data-testid="test-result-description-frame"]{min-height:9em' in page
    proc = _chromium(tmp_path / "chrome", "--dump-dom", built_run.as_uri() + "#/" + _result_id(
        built_run, "config.hidden_size"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The frame this rule sizes is the one this Allure renders a description into.
    assert 'data-testid="test-result-description-frame"' in proc.stdout


def test_the_ring_scores_only_the_claims_judged(built: Path, tmp_path: Path) -> None:
    """Allure's ring is passed ÷ all tests: the sample's skipped claim would count as a miss.
    The report shows passed ÷ judged (1 of the 5 not skipped) in its place."""
    page = built.read_text(encoding="utf-8")
    assert ('article[aria-label="Success rate"]>b::after{content:"20%";visibility:visible'
            in page)
    proc = _chromium(tmp_path / "chrome", "--dump-dom", built.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The element the rule replaces is the ring's own percentage, a direct child.
    assert re.search(r'<article aria-label="Success rate"[^>]*>(?:(?!</article>).)*'
                     r"<b [^>]*>16\.66%</b></article>", proc.stdout), proc.stdout[:3000]


def test_a_broken_claims_cause_wraps_in_its_box(built: Path, tmp_path: Path) -> None:
    page = built.read_text(encoding="utf-8")
    assert ('[data-testid="test-result-error-message"] pre,'
            '[data-testid="test-result-error-trace"] pre{white-space:pre-wrap' in page)
    proc = _chromium(tmp_path / "chrome", "--dump-dom", built.as_uri() + "#/" + _result_id(
        built, "perf.baseline_tps"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The boxes this rule wraps are the ones this Allure renders a broken claim's cause in.
    assert re.search(r'data-testid="test-result-error-message"[^>]*><pre>[^<]*'
                     r"the baseline measurement could not be made", proc.stdout)


def _result_id(index: Path, name: str) -> str:
    import base64
    import json

    page = index.read_text(encoding="utf-8")
    for found in re.finditer(r'd\("data/test-results/([0-9a-f]+)\.json","([^"]+)"\)', page):
        if json.loads(base64.b64decode(found.group(2)))["name"] == name:
            return found.group(1)
    raise AssertionError(f"no test result named {name} in {index}")
