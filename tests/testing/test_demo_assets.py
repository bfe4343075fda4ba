"""The demonstration assets: written once, whole, however many processes ask at once; the demo
profiles' floor, decided on a busy machine."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from specgate.testing import demo


def _ask(root: str) -> str:
    return str(demo.ensure_assets(Path(root)))


def test_assets_are_written_beside_root_and_renamed_into_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "demo"
    written: list[Path] = []
    real = demo._demo

    def watched(folder: Path) -> None:
        written.append(folder)
        assert not root.exists(), "root is visible while its assets are being written"
        real(folder)

    monkeypatch.setattr(demo, "_demo", watched)
    assert demo.ensure_assets(root) == root
    assert len(written) == 1
    assert written[0].parent == tmp_path
    assert written[0] != root
    assert not written[0].exists()  # renamed to root
    assert (root / ".assets-version").read_text().strip() == f"demo-{demo.ASSETS_VERSION}"
    assert (root / "reference" / "config.json").is_file()
    # A second ask writes nothing.
    assert demo.ensure_assets(root) == root
    assert len(written) == 1


def test_a_failed_write_leaves_neither_root_nor_its_scratch_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(folder: Path) -> None:
        (folder / "target").mkdir()
        raise OSError("disk full")

    monkeypatch.setattr(demo, "_demo", broken)
    with pytest.raises(OSError, match="disk full"):
        demo.ensure_assets(tmp_path / "demo")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.lock"]


def test_processes_asking_at_once_all_get_whole_assets(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        got = pool.map(_ask, [str(root)] * 8)
    assert got == [str(root)] * 8
    assert (root / ".assets-version").read_text().strip() == f"demo-{demo.ASSETS_VERSION}"
    for part in ("target", "drafter", "reference"):
        assert (root / part / "config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo", "demo.lock"]


# On a busy two-core machine the demo's baseline measures up to 5 % under the simulator's truth,
# its 98.33 % interval reaching 11 % under it (the client reads messages tens of ms late in
# decode windows of 155 ms, and the launch spread widens the interval by ±4.8 %).
BUSY_LOW = 0.89


@pytest.mark.parametrize("name", ["demo", "demo-concurrency"])
def test_the_demo_baseline_floor_is_decided_on_a_busy_machine(name: str) -> None:
    from specgate.core.profile import default_profile_path, load_profile
    from specgate.testing.simulator import model

    profile = load_profile(default_profile_path().with_name(f"{name}.toml"))
    demo.ensure_assets(profile.demo_assets(), profile.demo.kind)
    truth = model.truth_for_profile(profile)
    floor = profile.thresholds.baseline_tps_min
    assert floor is not None
    # The floor sits below the lowest interval a busy machine gives, with room to spare: the
    # claim passes there, and a baseline 15 % slower than the demo's would not clear it.
    assert floor < 0.97 * BUSY_LOW * truth.baseline_tps, (floor, truth.baseline_tps)
    assert floor > 0.85 * truth.baseline_tps, (floor, truth.baseline_tps)
