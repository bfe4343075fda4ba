"""Every file specgate reads is checked to be a regular file of bounded size, and JSON of bounded
nesting, before it is read: a named pipe, a folder, an oversized file or JSON nested thousands of
levels deep where an input belongs is one sentence naming the file, never a blocked run or a
RecursionError."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ckpt_support import tiny_drafter

from specgate.core import files
from specgate.core.errors import SpecgateError

# A ceiling against a reader that blocks on a pipe: the reader is run in a thread, and after
# this long the test opens the pipe's other end itself (so nothing stays blocked) and fails.
BLOCK_CEILING_S = 30.0


def _guarded(call: Callable[[], Any], fifo: Path) -> tuple[Any, BaseException | None]:
    """call() in a thread: its result or exception; fails the test if it blocked on fifo."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # what the reader raised is the result under test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(BLOCK_CEILING_S)
    if thread.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # releases the blocked reader
        os.close(fd)
        thread.join(BLOCK_CEILING_S)
        pytest.fail(f"reading {fifo} blocked on the named pipe")
    return box.get("value"), box.get("error")


def _read_config(target: Path) -> Any:
    from specgate.io.checkpoint import read_config

    return read_config(target.parent)


def _identify_config(target: Path) -> Any:
    from specgate.io.identity import identify

    return identify(target.parent)


def _identify_weights(target: Path) -> Any:
    from specgate.io.identity import identify

    return identify(target.parent)


def _open_drafter(target: Path) -> Any:
    from specgate.io.checkpoint import open_drafter

    return open_drafter(target.parent)


def _read_header(target: Path) -> Any:
    from specgate.io.safetensors_io import read_header

    return read_header(target)


def _load_map(target: Path) -> Any:
    from specgate.io.vocab_maps import load_map

    return load_map(target)


def _prompts(target: Path) -> Any:
    from specgate.results.prompts import load_jsonl

    return load_jsonl(target)


def _template(target: Path) -> Any:
    from specgate.results.prompts import target_template

    return target_template(target.parent)


def _metrics(target: Path) -> Any:
    from specgate.io.metrics_log import read_metrics

    return read_metrics(target)


def _history(target: Path) -> Any:
    from specgate.io.history import read_history

    return read_history(target)


def _dump(target: Path) -> Any:
    from specgate.io.dump import open_dump

    return open_dump(target.parent)


def _profile(target: Path) -> Any:
    from specgate.core.profile import load_profile

    return load_profile(target)


def _matrix(target: Path) -> Any:
    from specgate.core.matrix import load_matrix

    return load_matrix(target)


def _drafter_with(folder: Path, replaced: str) -> Path:
    """A tiny drafter whose file `replaced` (if it has one) is taken away, for a pipe to stand
    in its place."""
    tiny_drafter(folder)
    (folder / replaced).unlink(missing_ok=True)
    return folder / replaced


def _dump_folder(folder: Path) -> Path:
    from specgate.io.safetensors_io import TensorSpec, write_sparse

    folder.mkdir(parents=True)
    write_sparse(folder / "s0.safetensors", {
        "input_ids": TensorSpec("I64", (4,)), "aux_hidden_states": TensorSpec("F32", (4, 6))})
    return folder / "metadata.json"


# (reader, where the pipe goes): each reader of a file specgate takes from a user.
READERS: dict[str, tuple[Callable[[Path], Any], Callable[[Path], Path]]] = {
    "config.json": (_read_config, lambda d: _drafter_with(d / "drafter", "config.json")),
    "identity config.json": (_identify_config,
                             lambda d: _drafter_with(d / "drafter", "config.json")),
    "identity weights": (_identify_weights,
                         lambda d: _drafter_with(d / "drafter", "model.safetensors")),
    "drafter weights": (_open_drafter,
                        lambda d: _drafter_with(d / "drafter", "model.safetensors")),
    "shard index": (_open_drafter,
                    lambda d: _drafter_with(d / "drafter", "model.safetensors.index.json")),
    "safetensors header": (_read_header, lambda d: d / "x.safetensors"),
    "vocab map .pt": (_load_map, lambda d: d / "map.pt"),
    "prompt file": (_prompts, lambda d: d / "prompts.jsonl"),
    "chat template": (_template, lambda d: d / "target" / "chat_template.jinja"),
    "tokenizer config": (_template, lambda d: d / "target" / "tokenizer_config.json"),
    "metrics log": (_metrics, lambda d: d / "train.jsonl"),
    "history": (_history, lambda d: d / "verdicts.jsonl"),
    "dump metadata": (_dump, lambda d: _dump_folder(d / "dump")),
    "profile": (_profile, lambda d: d / "p.toml"),
    "matrix": (_matrix, lambda d: d / "drafters.toml"),
}


@pytest.mark.parametrize("case", list(READERS))
def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path, case: str) -> None:
    if case == "vocab map .pt":
        pytest.importorskip("torch")
    reader, place = READERS[case]
    target = place(tmp_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(target)
    value, error = _guarded(lambda: reader(target), target)
    # Readers that never raise (a verdict's identity) say it in what they return.
    said = str(error) if error is not None else json.dumps(value, default=str)
    assert error is None or isinstance(error, (SpecgateError, OSError)), repr(error)
    assert str(target) in said, said
    assert "named pipe" in said, said


@pytest.mark.parametrize(("name", "reader"), [
    ("config.json", _read_config), ("identity", _identify_config)])
def test_an_oversized_config_is_refused_unread(tmp_path: Path, name: str,
                                               reader: Callable[[Path], Any]) -> None:
    target = tmp_path / "d" / "config.json"
    target.parent.mkdir()
    with open(target, "wb") as fh:  # sparse: 32 GiB on paper, nothing on disk
        fh.truncate(32 << 30)
    try:
        said = json.dumps(reader(target), default=str)
    except SpecgateError as exc:
        said = str(exc)
    assert str(target) in said, said
    assert f"over the {files.CONFIG_BYTES} bytes" in said, said


@pytest.mark.parametrize("text", [
    "[" * 5000 + "]" * 5000,
    '{"a": ' * 3000 + "1" + "}" * 3000,
    # Brackets inside strings, escaped quotes and backslashes do not count; these do.
    '{"s": "[[[\\"\\\\", "x": ' + "[" * 200 + "]" * 200 + "}",
])
def test_deep_json_is_refused_before_it_is_parsed(text: str) -> None:
    with pytest.raises(files.JsonTooDeep, match="nests JSON too deeply"):
        files.loads_json(text)


@pytest.mark.parametrize(("text", "depth"), [
    ('{"a": [1, {"b": "]]]]}}}"}]}', 3),
    ('["\\\\", ["\\"[[[["]]', 2),
    ('"[[[["', 0),
    ("[" * 127 + "]" * 127, 127),
])
def test_json_depth_counts_as_the_parser_lexes(text: str, depth: int) -> None:
    assert files.json_depth(text) == depth
    assert files.json_depth(text.encode()) == depth
    files.loads_json(text)  # within the bound: parsed


def test_a_device_and_a_folder_are_refused(tmp_path: Path) -> None:
    with pytest.raises(files.UnreadableFile, match="character device, not a regular file"):
        files.read_bytes("/dev/zero", limit=10)
    with pytest.raises(files.UnreadableFile, match="a folder, not a regular file"):
        files.read_bytes(tmp_path, limit=10)


def _offline_probe(work: Path, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                   dict[str, Any]]:
    """The demo profile's offline claims in a real pytest session, as a user runs them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGATE_"))}
    env["SPECGATE_CACHE"] = str(work / "cache")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "-m", "probe and not live", "--specgate-profile=demo", *args],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    doc = json.loads((work / "reports" / "verdict.json").read_text())
    return proc, doc


@pytest.mark.slow
def test_a_deeply_nested_target_config_breaks_one_claim_naming_the_file(
        tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text('{"hidden_size": ' + "[" * 5000 + "]" * 5000 + "}")
    proc, doc = _offline_probe(tmp_path, f"--specgate-target-model={target}")
    out = proc.stdout + proc.stderr
    assert "INTERNALERROR" not in out, out[-3000:]
    assert "RecursionError" not in out, out[-3000:]
    assert proc.returncode == 1, out[-3000:]
    claims = {c["id"]: c for c in doc["claims"]}
    broken = claims["config.target_compat"]
    assert broken["status"] == "broken"
    assert f"{target / 'config.json'}: nests JSON too deeply" in broken["message"]
    assert doc["complete"] is True
    assert "nests JSON too deeply" in doc["identity"]["target"]["unreadable"]


@pytest.mark.slow
def test_a_named_pipe_for_the_drafters_weights_does_not_block_the_run(tmp_path: Path) -> None:
    proc, _ = _offline_probe(tmp_path)  # the demo's assets, generated once
    assert proc.returncode == 0, proc.stdout[-3000:]
    drafter = tmp_path / "drafter"
    shutil.copytree(tmp_path / "cache" / "demo" / "drafter", drafter)
    (drafter / "model.safetensors").unlink()
    os.mkfifo(drafter / "model.safetensors")
    try:
        proc, doc = _offline_probe(tmp_path, f"--specgate-drafter={drafter}")
    except subprocess.TimeoutExpired:
        pytest.fail("the run blocked on the named pipe")
    assert proc.returncode == 1, proc.stdout[-3000:]
    claims = {c["id"]: c for c in doc["claims"]}
    weights = claims["weights.layout"]
    assert weights["status"] == "broken"
    assert f"{drafter / 'model.safetensors'}: is a FIFO (named pipe)" in weights["message"]
    assert "named pipe" in doc["identity"]["drafter"]["weights_unreadable"]


def test_a_json_object_is_read_only_when_written_since_the_time_asked(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"config": "baseline"}))
    os.utime(path, (1000.0, 1000.0))
    assert files.json_object_since(path, 1000.0, limit=files.CONFIG_BYTES) == {
        "config": "baseline"}
    assert files.json_object_since(path, 1000.5, limit=files.CONFIG_BYTES) is None
    for text in ("[1, 2]", "{torn", "[" * 200 + "]" * 200):
        path.write_text(text)
        assert files.json_object_since(path, 0.0, limit=files.CONFIG_BYTES) is None, text
    assert files.json_object_since(tmp_path / "absent.json", 0.0, limit=files.CONFIG_BYTES) is None
    assert files.json_object_since(tmp_path, 0.0, limit=files.CONFIG_BYTES) is None  # a folder
