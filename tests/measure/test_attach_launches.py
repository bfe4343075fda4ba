"""Attached servers in the launch log: a running server measured again is the launch it was
(its /server_info's random_seed and startup_time are the same), a restarted one is a new launch,
and enough of them make the deployment's own launch spread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fault_support as fh
import pytest

from specgate.core.profile import Profile, load_profile
from specgate.io import launch_log
from specgate.measure import launches, live
from specgate.serving import launch, server
from specgate.serving.launch import Config
from specgate.serving.server import ServerHandle
from specgate.testing import demo

# Its tests start simulators of their own: one xdist worker runs them all (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("test_attach_launches")


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    """A fast simulator profile whose own launches decide the spread from two launches on."""
    root = tmp_path_factory.mktemp("attach-launches")
    assets = demo.ensure_assets(root / "assets")
    path, _marker = fh.write_profile(root, assets)
    text = path.read_text(encoding="utf-8").replace(
        "[bench]\n", "[bench]\nlaunch_spread_min_launches = 2\n")
    path.write_text(text, encoding="utf-8")
    return load_profile(path)


def _start(profile: Profile, config: Config, log: Path) -> ServerHandle:
    """A simulator started outside the run under test (returns once it answers)."""
    spec = launch.build_command(profile, config)
    return server.launch(spec, log, startup_timeout_s=60)


@pytest.fixture
def running(profile: Profile, tmp_path: Path) -> Iterator[dict[str, ServerHandle]]:
    configs: tuple[Config, Config] = ("baseline", "speculative")
    handles = {c: _start(profile, c, tmp_path / f"{c}-1.log") for c in configs}
    try:
        yield handles
    finally:
        for handle in handles.values():
            handle.stop()


def _probe(profile: Profile, handles: dict[str, ServerHandle], reports: Path) -> live.LiveResults:
    attached = profile.with_overrides(baseline_url=handles["baseline"].url,
                                      server_url=handles["speculative"].url)
    return live.run_live(attached, reports)


def _logged(reports: Path, config: str) -> list[launch_log.LaunchRecord]:
    return [r for r in launch_log.read(launch_log.log_file(reports)) if r.config == config]


def test_a_second_probe_of_the_same_running_server_is_not_a_new_launch(
        profile: Profile, running: dict[str, ServerHandle], tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    first = _probe(profile, running, reports)
    assert first.baseline.failure is None, first.baseline.failure
    assert set(first.baseline.attached_launch) == {"fingerprint", "identity"}
    logged = _logged(reports, "baseline")
    assert [r.launch for r in logged] == [first.baseline.attached_launch["identity"]]
    assert logged[0].fingerprint == first.baseline.attached_launch["fingerprint"]
    assert len(_logged(reports, "speculative")) == 1
    second = _probe(profile, running, reports)
    assert second.baseline.attached_launch == first.baseline.attached_launch
    assert len(_logged(reports, "baseline")) == 1
    assert len(_logged(reports, "speculative")) == 1
    progress = (reports / "live" / "progress.log").read_text(encoding="utf-8")
    assert "baseline: the attached server is a launch already logged" in progress
    # One launch: the prior, updated by nothing the deployment's own launches could say.
    assert second.launch_coverage.baseline.source == "prior"


def test_a_restarted_attached_server_is_a_new_launch_and_its_launches_are_learned(
        profile: Profile, running: dict[str, ServerHandle], tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    first = _probe(profile, running, reports)
    assert first.baseline.failure is None, first.baseline.failure
    seed = running["baseline"].server_info["random_seed"]
    running["baseline"].stop()  # returns once the process has exited
    running["baseline"] = _start(profile, "baseline", tmp_path / "baseline-2.log")
    # SGLang draws it from 2**30 values at each launch.
    assert running["baseline"].server_info["random_seed"] != seed
    again = _probe(profile, running, reports)
    assert again.baseline.failure is None, again.baseline.failure
    # Another process on another port: the same deployment, another launch of it.
    assert again.baseline.attached_launch["fingerprint"] == \
        first.baseline.attached_launch["fingerprint"]
    assert again.baseline.attached_launch["identity"] != \
        first.baseline.attached_launch["identity"]
    assert len(_logged(reports, "baseline")) == 2
    assert len(_logged(reports, "speculative")) == 1  # the same speculative launch
    spread = again.launch_coverage.baseline
    assert spread.source == "learned", spread
    assert spread.launches == 2


def test_a_server_info_without_its_launch_fields_is_not_logged_and_says_why(
        profile: Profile, running: dict[str, ServerHandle], tmp_path: Path) -> None:
    info = dict(running["baseline"].server_info)
    identity, why = launches.launch_identity(info)
    assert identity
    assert not why
    del info["startup_time"]
    assert launches.launch_identity(info) == (
        "", "its /server_info gives no startup_time durations to tell one launch from the next")
    assert launches.attached_launch(info, ()) == {
        "why": "its /server_info gives no startup_time durations to tell one launch from the "
               "next"}
