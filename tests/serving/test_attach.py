"""Attach mode end to end: --server-url/--baseline-url measure running servers, leave them up."""

from __future__ import annotations

from pathlib import Path

import fault_support as fh
import pytest

from specgate.core.profile import load_profile
from specgate.serving import launch, server
from specgate.testing import demo

# Its tests share a costly fixture: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_attach")


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory):
    """A baseline and a speculative simulator started outside the harness run under test."""
    root = tmp_path_factory.mktemp("attach")
    assets = demo.ensure_assets(root / "assets")
    profile_path, _marker = fh.write_profile(root, assets)
    profile = load_profile(profile_path)
    handles = []
    try:
        for config in ("baseline", "speculative"):
            spec = launch.build_command(profile, config)
            handles.append(server.launch(spec, root / f"{config}.log", startup_timeout_s=30))
        yield profile_path, handles[0], handles[1]
    finally:
        for handle in handles:
            handle.stop()


def test_attached_servers_are_measured_and_left_running(running, tmp_path: Path) -> None:
    profile_path, baseline, spec = running
    run = fh.run_probe(profile_path, tmp_path, f"--server-url={spec.url}",
                       f"--baseline-url={baseline.url}", select="live")
    claims = run.claims()
    for cid in ("perf.baseline_tps", "spec.accept_len"):
        assert claims[cid]["status"] == "passed", (cid, run.output[-2000:])
        assert claims[cid]["observed"] > 0, claims[cid]
    # An attached server on this machine is found by its listening port and its environment
    # read from /proc; a remote one would be skipped with the reason.
    assert claims["env.server_env"]["status"] == "passed"
    # No teardown for servers the harness did not start.
    assert baseline.alive()
    assert spec.alive()


def test_swapped_urls_are_refused_with_the_reason(running, tmp_path: Path) -> None:
    profile_path, baseline, spec = running
    run = fh.run_probe(profile_path, tmp_path, f"--server-url={baseline.url}",
                       f"--baseline-url={spec.url}", select="live")
    claims = run.claims()
    assert claims["perf.baseline_tps"]["status"] == "broken"
    assert claims["spec.accept_len"]["status"] == "broken"
    text = "\n".join([claims["spec.accept_len"]["message"], claims["perf.baseline_tps"]["message"],
                      *run.causes_of("spec.accept_len"), *run.causes_of("perf.baseline_tps")])
    assert "speculative" in text.lower()
    assert baseline.alive()
    assert spec.alive()
