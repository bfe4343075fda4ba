"""Bounded work on adversarial inputs: each ends in a sentence naming the file, quickly."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from ckpt_support import tiny_drafter

from specgate.core.errors import CheckpointError
from specgate.io import checkpoint
from specgate.io.checkpoint import expected_layout, open_drafter, read_config


@pytest.mark.parametrize(("text", "match"), [
    ('{"hidden_size": ' + "9" * 5000 + "}", "number specgate will not read"),
    ("[" * 100_000 + "]" * 100_000, "nests JSON too deeply"),
])
def test_config_json_numbers_and_nesting(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=match) as err:
        read_config(tmp_path)
    assert str(tmp_path / "config.json") in str(err.value)


@pytest.mark.parametrize(("change", "match"), [
    ({"hidden_size": 1e400}, "garbles field"),
    ({"num_attention_heads": 0}, "head size cannot be derived"),
])
def test_layout_of_a_garbled_config(change: dict[str, object], match: str) -> None:
    config = {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
              "vocab_size": 256, **change}
    with pytest.raises(CheckpointError, match=match):
        expected_layout(json.loads(json.dumps(config)))


def test_a_drafter_path_that_is_a_symlink_to_itself(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(CheckpointError, match="loop"):
        open_drafter(loop)


def test_find_is_not_quadratic(tmp_path: Path) -> None:
    """find() per tensor on 20,000 tensors: linear (the map is built once)."""
    drafter = open_drafter(tiny_drafter(tmp_path / "d"))
    info = next(iter(drafter.tensors.values()))
    many = checkpoint.Drafter(drafter.path, drafter.config,
                              {f"model.t{i}": info for i in range(20_000)}, drafter.files)
    # CPU time of this process: the work done, which a busy machine does not stretch.
    started = time.process_time()
    found = sum(many.find(f"t{i}") is not None for i in range(20_000))
    assert found == 20_000
    assert time.process_time() - started < 2.0  # quadratic: ~400 M dict inserts, minutes


def _empty_tensors(folder: Path, n: int, name: str = "extra.safetensors") -> None:
    """A valid safetensors file of n zero-size tensors beside a drafter's own weights."""
    import struct

    header = json.dumps({f"extra.t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
                         for i in range(n)}).encode()
    (folder / name).write_bytes(struct.pack("<Q", len(header)) + header)


def test_empty_tensors_are_counted_not_scanned(tmp_path: Path) -> None:
    """300,000 zero-size tensors: opened, laid out, compared and health-scanned; the scan keeps a
    finding only for tensors with bytes, and the claims' details list a bounded number of
    names beside the full count."""
    from ckpt_support import make_profile

    from specgate.claims.result import DETAILS_LISTED
    from specgate.claims.weights import health_claim, layout_claim, tensor_parity
    from specgate.io import health

    n = 300_000
    folder = tiny_drafter(tmp_path / "d")
    _empty_tensors(folder, n)
    drafter = open_drafter(folder)
    own = len(drafter.tensors) - n
    parity = tensor_parity(drafter, drafter)
    report = health.scan(drafter, workers=2)
    assert report.empty == n
    assert len(report.tensors) == own
    assert report.count == len(drafter.tensors)
    assert report.bytes_scanned + report.bytes_in_holes == sum(
        i.nbytes for i in drafter.tensors.values())
    assert len(parity.matched) + len(parity.frozen) == len(drafter.tensors)
    layout = layout_claim(make_profile(folder))
    assert layout.details["unexpected_count"] == n
    assert len(layout.details["unexpected"]) == DETAILS_LISTED
    assert len(json.dumps(layout.to_json())) < 8192
    found = health_claim(make_profile(folder), workers=1)
    assert found.status == "passed", found.message
    assert f"{len(drafter.tensors)} tensors" in found.message


def test_a_large_header_leaves_no_object_per_tensor(tmp_path: Path) -> None:
    """A header of many entries is held as columns: opening the drafter, finding its tensors,
    checking its layout and scanning its health leave nothing per tensor for the cycle
    collector to walk on every full collection of the run."""
    import gc

    from specgate.claims.weights import layout_problems
    from specgate.io import health

    n = 50_000
    folder = tiny_drafter(tmp_path / "d")
    _empty_tensors(folder, n)
    gc.collect()
    before = len(gc.get_objects())
    drafter = open_drafter(folder)
    assert drafter.find("d2t") is not None
    _, unexpected = layout_problems(drafter)
    report = health.scan(drafter)
    gc.collect()
    assert len(gc.get_objects()) - before < n // 10
    assert len(unexpected) == n
    assert report.empty == n
    info = drafter.tensors[f"extra.t{n - 1}"]
    assert (info.name, info.dtype, info.shape, info.nbytes) == (f"extra.t{n - 1}", "F32", (0,), 0)


COUNTER = """
import json, os, time
import importlib

counts = {}


def _count(module, name):
    mod = importlib.import_module(module)
    real = getattr(mod, name)

    def counted(*args, **kwargs):
        counts[f"{module}.{name}"] = counts.get(f"{module}.{name}", 0) + 1
        return real(*args, **kwargs)

    setattr(mod, name, counted)


def pytest_configure(config):
    counts["started"] = time.monotonic()
    _count("specgate.io.safetensors_io", "read_file_header")
    _count("specgate.claims.verdict", "write")
    _count("specgate.claims.config", "read_config")


def pytest_unconfigure(config):
    counts["seconds"] = time.monotonic() - counts.pop("started")
    with open(os.environ["SPECGATE_TEST_COUNTS"], "w") as fh:
        json.dump(counts, fh)
"""


def _offline_run(work: Path, folder: Path, keys: int = 0) -> dict[str, object]:
    """The offline claims in a real pytest session on folder, with `keys` [drafter.expect] keys
    the drafter's config.json carries; what it wrote and how often it did the costly things."""
    import os
    import subprocess
    import sys

    work.mkdir()
    (work / "countwork.py").write_text(COUNTER)
    expect = "\n".join(f"k{i} = {i}" for i in range(keys))
    (work / "p.toml").write_text(f'name = "bounded"\n[drafter]\npath = "{folder}"\n'
                                 f"[drafter.expect]\nhidden_size = 32\n{expect}\n")
    env = {**os.environ, "SPECGATE_TEST_COUNTS": str(work / "counts.json")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "probe and not live",
                           "--profile", "p.toml", "-q", "-p", "no:cacheprovider",
                           "-p", "countwork"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    reports = work / "reports"
    results = reports / "allure-results"
    return {
        "counts": json.loads((work / "counts.json").read_text()),
        "verdict": json.loads((reports / "verdict.json").read_text()),
        "verdict_bytes": (reports / "verdict.json").stat().st_size,
        "junit_bytes": (reports / "junit.xml").stat().st_size,
        "results": len(list(results.glob("*-result.json"))),
        "containers": len(list(results.glob("*-container.json"))),
    }


def test_the_offline_run_does_not_grow_with_empty_tensors(tmp_path: Path) -> None:
    """The same claims on a drafter with 20 and with 20,000 zero-size tensors: each header is
    read once, and the verdict, junit.xml and Allure results keep their size and number."""
    runs = {}
    for n in (20, 20_000):
        folder = tiny_drafter(tmp_path / f"d{n}")
        _empty_tensors(folder, n)
        runs[n] = _offline_run(tmp_path / f"w{n}", folder)
    few, many = runs[20], runs[20_000]
    for run in (few, many):
        assert run["counts"]["specgate.io.safetensors_io.read_file_header"] == 2
    assert many["verdict_bytes"] < few["verdict_bytes"] + 4096
    assert many["junit_bytes"] < few["junit_bytes"] + 4096
    assert (many["results"], many["containers"]) == (few["results"], few["containers"])


def test_the_offline_run_does_per_key_work_once(tmp_path: Path) -> None:
    """200 [drafter.expect] keys: config.json is read once for all of them, each claim leaves
    one Allure file (no container per claim), and the interim verdicts are few."""
    from specgate.plugin.verdict_writer import INTERIM_EVERY, INTERIM_SECONDS

    runs = {}
    for keys in (2, 200):
        folder = tiny_drafter(tmp_path / f"d{keys}")
        _config_of(folder, **{f"k{i}": i for i in range(keys)})
        runs[keys] = _offline_run(tmp_path / f"w{keys}", folder, keys=keys)
    few, many = runs[2], runs[200]
    fields = [c for c in many["verdict"]["claims"] if c["id"].startswith("config.k")]
    assert len(fields) == 200
    assert {c["status"] for c in fields} == {"passed"}
    assert many["verdict"]["complete"] is True
    reads = "specgate.claims.config.read_config"
    assert many["counts"][reads] == few["counts"][reads] == 1
    assert many["results"] - few["results"] == 198
    assert many["containers"] == few["containers"]
    counts = many["counts"]
    assert counts["specgate.claims.verdict.write"] <= (
        INTERIM_EVERY + counts["seconds"] / INTERIM_SECONDS + 2)


def test_more_expect_keys_than_a_config_has_are_refused(tmp_path: Path) -> None:
    from specgate.core.errors import ProfileError
    from specgate.core.profile import MAX_EXPECT_KEYS, load_profile

    keys = "\n".join(f"k{i} = {i}" for i in range(MAX_EXPECT_KEYS + 1))
    (tmp_path / "p.toml").write_text(f'name = "many"\n[drafter.expect]\n{keys}\n')
    with pytest.raises(ProfileError) as err:
        load_profile(tmp_path / "p.toml")
    assert str(tmp_path / "p.toml") in str(err.value)
    assert f"{MAX_EXPECT_KEYS + 1} keys" in str(err.value)
    keys = "\n".join(f"k{i} = {i}" for i in range(MAX_EXPECT_KEYS))
    (tmp_path / "p.toml").write_text(f'name = "many"\n[drafter.expect]\n{keys}\n')
    assert len(load_profile(tmp_path / "p.toml").drafter.expect) == MAX_EXPECT_KEYS


def _config_of(folder: Path, **change: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))


def test_a_config_implying_a_billion_fc_norm_tensors(tmp_path: Path) -> None:
    """num_aux_hidden_states = 10**9 with fc_norm: refused against the checkpoint's real tensor
    count, at once, without building a billion-entry layout."""
    from ckpt_support import make_profile

    from specgate.claims.weights import layout_claim

    folder = tiny_drafter(tmp_path / "d")
    _config_of(folder, num_aux_hidden_states=10**9, fc_norm=True)
    started = time.process_time()
    result = layout_claim(make_profile(folder))
    assert time.process_time() - started < 1.0
    assert result.status == "broken"
    assert str(folder / "config.json") in result.message  # the contract: the file is named


@pytest.mark.parametrize("ids", [["a", None], [1, True, 3], [1.5]])
def test_aux_layer_ids_that_are_not_integers(tmp_path: Path, ids: list[object]) -> None:
    """A dedicated message naming the key, in both claims that read the ids (not a
    ValueError/TypeError left to the generic guard)."""
    from ckpt_support import make_profile

    from specgate.claims.config import target_compat_claim
    from specgate.claims.weights import layout_claim
    from specgate.testing.generate import small_target_config

    folder = tiny_drafter(tmp_path / "d")
    _config_of(folder, eagle_config={"eagle_aux_hidden_state_layer_ids": ids})
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps(small_target_config()))
    profile = make_profile(folder, target=tmp_path / "t")
    for result in (layout_claim(profile), target_compat_claim(profile)):
        assert result.status == "broken", result
        assert "eagle_aux_hidden_state_layer_ids" in result.message
        assert str(folder / "config.json") in result.message


@pytest.mark.parametrize(("vocab", "keep"), [
    (10**11, ()),  # beyond int32 token ids
    (2**30, ()),  # no tensor confirms it, over the identity-map bound
    (2**30, ("lm_head.weight",)),  # lm_head has other rows
])
def test_a_full_vocab_drafter_of_absurd_size(tmp_path: Path, vocab: int,
                                            keep: tuple[str, ...]) -> None:
    """vocab_size = draft_vocab_size = 1e11 with no maps: a broken claim naming config.json at
    once, no MemoryError from building the implied identity map."""
    from ckpt_support import make_profile

    from specgate.claims.vocab import d2t_match_claim, invariants_claim

    folder = tiny_drafter(tmp_path / "d", {
        n: None for n in ("d2t", "t2d", "lm_head.weight", "embed_tokens.weight")
        if n not in keep})
    _config_of(folder, vocab_size=vocab, draft_vocab_size=vocab)
    profile = make_profile(folder, reference=folder)
    for claim in (invariants_claim, d2t_match_claim):
        started = time.process_time()
        result = claim(profile)
        assert time.process_time() - started < 1.0
        assert result.status == "broken", result
        assert str(folder / "config.json") in result.message
        assert str(vocab) in result.message


def test_a_profile_over_a_mebibyte_is_refused_at_once(tmp_path: Path) -> None:
    """A 34 MB profile took 36-48 s to parse; anything over 1 MiB is refused, naming the file."""
    from specgate.core.errors import ProfileError
    from specgate.core.profile import MAX_PROFILE_BYTES, load_profile

    big = tmp_path / "big.toml"
    keys = "".join(f"k{i} = {i}\n" for i in range(400_000))
    big.write_text(f'name = "big"\n[drafter.expect]\n{keys}')
    assert big.stat().st_size > MAX_PROFILE_BYTES
    started = time.process_time()
    with pytest.raises(ProfileError) as err:
        load_profile(big)
    assert time.process_time() - started < 0.5
    assert str(big) in str(err.value)
    assert str(MAX_PROFILE_BYTES) in str(err.value)


def test_a_profile_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    from specgate.core.errors import ProfileError
    from specgate.core.profile import load_profile

    fifo = tmp_path / "p.toml"
    os.mkfifo(fifo)
    with pytest.raises(ProfileError) as err:
        load_profile(fifo)
    assert str(fifo) in str(err.value)


def test_a_drafter_path_that_is_a_file(tmp_path: Path) -> None:
    """model.safetensors given as the drafter: "is a file, not a folder", in every claim that
    reads the drafter (config.* must not say config.json "is not valid JSON … re-download it")."""
    from ckpt_support import make_profile

    from specgate.claims.config import config_field_claim
    from specgate.claims.weights import layout_claim

    weights = tiny_drafter(tmp_path / "d") / "model.safetensors"
    profile = make_profile(weights, expect={"hidden_size": 32})
    for result in (config_field_claim(profile, "hidden_size"), layout_claim(profile)):
        assert result.status == "broken"
        assert result.message.startswith(f"{weights}: is a file, not a folder")


@pytest.mark.parametrize("key", ['"a"', '"a\\"[[{"'])  # without and with an escape (the walk)
@pytest.mark.parametrize(("depth", "refused"), [(127, False), (128, True)])
def test_header_depth_is_counted_exactly(key: str, depth: int, refused: bool) -> None:
    """The byte count of nesting (no backslash in the header) and the walk (one) agree with the
    library's limit of 127 containers; brackets inside strings do not count."""
    from specgate.io.safetensors_io import _json_problem

    inner = "[" * (depth - 1) + '"[[{"' + "]" * (depth - 1)
    raw = ("{" + key + ": " + inner + "}").encode()
    doc = json.loads(raw)
    assert (_json_problem(doc, raw) is not None) is refused


def test_the_cycle_collector_is_held_off_while_a_header_is_parsed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On 300,000 entries the collector walked the growing header more than the parse took; it
    is off during the parse and on again after, a refused header included."""
    import gc

    from specgate.io import safetensors_io

    seen: list[bool] = []
    real = safetensors_io._header_of

    def parse(path: Path, raw: bytes, data_start: int,
              file_size: int) -> safetensors_io.SafetensorsHeader:
        seen.append(gc.isenabled())
        return real(path, raw, data_start, file_size)

    monkeypatch.setattr(safetensors_io, "_header_of", parse)
    folder = tiny_drafter(tmp_path / "d")
    _empty_tensors(folder, 10)
    (folder / "bad.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00[]")
    assert gc.isenabled()
    safetensors_io.read_file_header(folder / "extra.safetensors")
    with pytest.raises(CheckpointError, match=r"bad\.safetensors"):
        safetensors_io.read_file_header(folder / "bad.safetensors")
    assert seen == [False, False]
    assert gc.isenabled()
