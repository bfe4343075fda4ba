"""The built report, opened offline in headless Chromium: phases and counts show, screenshot."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers_allure import make_results

from specgate.report import allure_meta
from specgate.report import build as report

# CHROMIUM_PATH (tox passes it through) wins over whatever is on PATH.
CHROMIUM = os.environ.get("CHROMIUM_PATH") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)

pytestmark = [
    pytest.mark.slow,
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
