"""Bad input, generated: every claim that reads the damaged file ends failed or broken (never
passed, never skipped, never a crash or a traceback), and a bad profile is a ProfileError naming
the file. Claims that do not read the damaged file must still pass."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgate.claims import config as config_claims
from specgate.claims import vocab, weights
from specgate.claims.result import ClaimResult, Status
from specgate.core.errors import ProfileError
from specgate.core.profile import load_profile, parse_profile
from specgate.io import vocab_maps
from specgate.testing import generate

CASE_LIMIT_S = 10  # a hang is a failure, not a stuck CI job (each case's own guard)
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])

WEIGHT_CLAIMS: tuple[Callable[[Any], ClaimResult], ...] = (
    weights.layout_claim, weights.health_claim, vocab.invariants_claim,
    config_claims.target_compat_claim)


@contextlib.contextmanager
def _deadline(seconds: int = CASE_LIMIT_S) -> Iterator[None]:
    def alarm(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny valid drafter (two shards with an index), a reference and a target config."""
    root = tmp_path_factory.mktemp("fuzzbase")
    shape = generate.tiny()
    ids = generate.default_token_ids(shape, seed=0)
    generate.write_drafter(root / "drafter", shape, token_ids=ids, seed=1, fill="random")
    generate.write_drafter(root / "sharded", shape, token_ids=ids, seed=1, shards=2)
    generate.write_drafter(root / "reference", shape, token_ids=ids, seed=2)
    generate.write_target_config(root / "target", "small")
    (root / "target" / "config.json").write_text(json.dumps(generate.small_target_config(shape)))
    return root


def _copy(base: Path, which: str = "drafter") -> tuple[Path, Path]:
    work = Path(tempfile.mkdtemp(prefix="specgate-fuzz-"))
    shutil.copytree(base / which, work / "drafter")
    return work, work / "drafter"


def _profile(base: Path, drafter: Path) -> Any:
    return parse_profile({"name": "fuzz", "drafter": {
        "path": str(drafter), "reference": str(base / "reference"),
        "expect": {"hidden_size": 32, "eagle_config.eagle_aux_hidden_state_layer_ids": [1, 3, 5]}},
        "target": {"path": str(base / "target")}})


BAD = (Status.FAILED, Status.BROKEN)


def _judge(result: object, want: tuple[Status, ...]) -> None:
    """A claim result a person can act on, with one of the wanted statuses: never a crash, never
    a traceback, never skipped (the profile gives every input)."""
    assert isinstance(result, ClaimResult)
    assert result.status in want, (result.id, result.status, result.message)
    if result.status in BAD:
        assert result.message.strip()
        assert "Traceback" not in result.message


def _run_claims(profile: Any, claims: tuple[Callable[[Any], ClaimResult], ...],
                want: tuple[tuple[Status, ...], ...]) -> list[Status]:
    statuses = []
    with _deadline():
        for claim, wanted in zip(claims, want, strict=True):
            result = claim(profile)
            _judge(result, wanted)
            statuses.append(result.status)
    return statuses


def _header_file(header: bytes, data: bytes, declared: int | None = None) -> bytes:
    length = len(header) if declared is None else declared
    return struct.pack("<Q", length) + header + data


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64),
                       st.floats(allow_nan=True), st.text(max_size=12))
_json = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
_dtype = st.sampled_from(["F32", "BF16", "F16", "I64", "BOOL", "U8", "F64", "Q4", "", "f32"])
_shape = st.lists(st.integers(-3, 2**40), max_size=3)
_entry = st.one_of(
    st.fixed_dictionaries({"dtype": _dtype, "shape": _shape,
                           "data_offsets": st.lists(st.integers(-5, 2**40), max_size=3)}),
    _json)


@FUZZ
@given(kind=st.sampled_from(["random", "header", "flip", "truncate"]),
       blob=st.binary(max_size=64), entries=st.dictionaries(
           st.sampled_from(["d2t", "t2d", "fc.weight", "lm_head.weight", "__metadata__",
                            "midlayer.self_attn.q_proj.weight", "x"]), _entry, max_size=4),
       declared=st.one_of(st.none(), st.integers(0, 2**64 - 1)),
       where=st.floats(0, 1), byte=st.integers(0, 255))
def test_safetensors_bytes_and_headers(base: Path, kind: str, blob: bytes,
                                       entries: dict[str, Any], declared: int | None,
                                       where: float, byte: int) -> None:
    work, drafter = _copy(base)
    try:
        target = drafter / "model.safetensors"
        raw = target.read_bytes()
        if kind == "random":
            target.write_bytes(blob)
        elif kind == "header":
            header = json.dumps(entries).encode()
            target.write_bytes(_header_file(header, blob, declared))
        elif kind == "flip":
            pos = int(where * (len(raw) - 1))
            target.write_bytes(raw[:pos] + bytes([byte]) + raw[pos + 1:])
        else:
            target.write_bytes(raw[: int(where * (len(raw) - 1))])
        if kind == "flip":
            # One flipped byte may land in tensor data, where a random-filled drafter stays a
            # sound drafter, or in the header, where it breaks: here either outcome is right,
            # as long as it is a result and not a crash.
            weights_want: tuple[Status, ...] = (Status.PASSED, *BAD)
        else:
            # No such file holds the tensors config.json implies, whole.
            weights_want = BAD
        # health judges the values of the tensors it finds, and a header that lists none (or
        # a few sound ones) holds no bad value: missing tensors are layout's finding, so health
        # may pass. target_compat reads config.json only, which is intact.
        _run_claims(_profile(base, drafter), WEIGHT_CLAIMS,
                    (weights_want, (Status.PASSED, *BAD), weights_want, (Status.PASSED,)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


@FUZZ
@given(config=st.one_of(_json, st.dictionaries(st.sampled_from([
    "architectures", "hidden_size", "vocab_size", "draft_vocab_size", "num_hidden_layers",
    "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "max_position_embeddings", "eagle_config", "torch_dtype"]), _json, max_size=8)),
    raw=st.one_of(st.none(), st.binary(max_size=40)))
def test_config_json(base: Path, config: Any, raw: bytes | None) -> None:
    work, drafter = _copy(base)
    try:
        text = raw if raw is not None else json.dumps(config).encode()
        (drafter / "config.json").write_bytes(text)
        claims = (*WEIGHT_CLAIMS,
                  lambda p: config_claims.config_field_claim(p, "hidden_size"),
                  lambda p: config_claims.config_field_claim(
                      p, "eagle_config.eagle_aux_hidden_state_layer_ids"))
        parsed = config if raw is None else None
        want = tuple(_config_want(parsed, key, value) for key, value in (
            ("hidden_size", 32), ("eagle_config.eagle_aux_hidden_state_layer_ids", [1, 3, 5])))
        # The weight claims need a sound config.json to say what the weights should be: a
        # generated one may still be sound enough, so only "no crash" is asked of them.
        _run_claims(_profile(base, drafter), claims,
                    ((Status.PASSED, *BAD),) * len(WEIGHT_CLAIMS) + want)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _config_want(config: Any, key: str, expected: Any) -> tuple[Status, ...]:
    """config.<key> passes exactly when the generated config holds the expected value there."""
    node = config
    for part in key.split("."):
        node = node.get(part, BAD) if isinstance(node, dict) else BAD
    same = node == expected and type(node) is type(expected)
    return (Status.PASSED,) if same else BAD


@FUZZ
@given(index=st.one_of(_json, st.fixed_dictionaries({"weight_map": st.dictionaries(
    st.sampled_from(["fc.weight", "d2t", "t2d", "lm_head.weight", "x"]),
    st.one_of(st.sampled_from(["model-00001-of-00002.safetensors", "missing.safetensors",
                               "../reference/model.safetensors", "/etc/passwd", "", "."]),
              _json), max_size=5)})))
def test_shard_index(base: Path, index: Any) -> None:
    work, drafter = _copy(base, "sharded")
    try:
        (drafter / "model.safetensors.index.json").write_text(json.dumps(index))
        # A generated index never names every tensor's shard: layout and invariants cannot pass.
        # health may (it judges the values of the tensors it finds; see above). target_compat
        # reads config.json only.
        _run_claims(_profile(base, drafter), WEIGHT_CLAIMS,
                    (BAD, (Status.PASSED, *BAD), BAD, (Status.PASSED,)))
    finally:
        shutil.rmtree(work, ignore_errors=True)


_array = st.tuples(
    st.sampled_from(["int64", "int32", "float32", "bool", "uint8", "float64"]),
    st.lists(st.integers(0, 70), min_size=0, max_size=2),
    st.integers(0, 2**31 - 1))


def _make(spec: tuple[str, list[int], int]) -> np.ndarray[Any, Any]:
    dtype, shape, seed = spec
    rng = np.random.default_rng(seed)
    values = rng.integers(-5, 300, size=tuple(shape))
    return values.astype(dtype)


@FUZZ
@given(d2t=st.one_of(st.none(), _array), t2d=st.one_of(st.none(), _array),
       sorted_ids=st.booleans(), as_pt=st.booleans())
def test_vocab_maps(base: Path, d2t: tuple[str, list[int], int] | None,
                    t2d: tuple[str, list[int], int] | None, sorted_ids: bool,
                    as_pt: bool) -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    work, drafter = _copy(base)
    try:
        path = drafter / "model.safetensors"
        tensors = load_file(str(path))
        maps: dict[str, np.ndarray[Any, Any]] = {}
        for name, spec in (("d2t", d2t), ("t2d", t2d)):
            tensors.pop(name, None)
            if spec is not None:
                arr = _make(spec)
                if sorted_ids and name == "d2t" and arr.ndim == 1 and arr.dtype.kind == "i":
                    arr = np.sort(np.abs(arr))
                maps[name] = arr
                tensors[name] = torch.from_numpy(np.ascontiguousarray(arr))
        save_file(tensors, str(path))
        claims = (vocab.invariants_claim, vocab.d2t_match_claim, vocab.t2d_match_claim)
        # A generated map is never sound and never matches the reference's (a random d2t that
        # is strictly increasing, in range and agrees with a random t2d does not occur in the
        # derandomized examples): each vocab claim fails or is broken.
        _run_claims(_profile(base, drafter), claims, (BAD, BAD, BAD))
        if as_pt and d2t is not None:
            pt = work / "map.pt"
            torch.save({k: tensors[k] for k in maps}, pt)
            with _deadline():
                vmap = vocab_maps.load_map(pt)
            assert vmap.d2t.size == maps["d2t"].size
    finally:
        shutil.rmtree(work, ignore_errors=True)


_PROFILE_LINES = [
    'name = "demo"', "[server]", "port = 0", 'port = "x"', "port = 70000", "tp = 0",
    'launcher = ""', "launcher = []", 'host = "0.0.0.0"', "[speculative]", "num_steps = 2",
    "eagle_topk = 1", "num_draft_tokens = 9", "[bench]", "repeats = -1", "max_new_tokens = 1",
    "[thresholds]", "accept_len_min = \"breakeven\"", "accept_len_min = \"lots\"",
    "d2t_match_min = 1.5", "[servr]", "[drafter.expect]", '"a.b" = [1, 2]', "x = ", "[[server]]",
    'name = 1', "[target]", "path = 3", "\x00", "\ud800"[:0] + "é = 1",
]


@FUZZ
@given(lines=st.lists(st.sampled_from(_PROFILE_LINES), max_size=10),
       noise=st.text(max_size=30))
def test_profile_toml(lines: list[str], noise: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="specgate-fuzz-profile-"))
    try:
        path = work / "p.toml"
        path.write_text("\n".join([*lines, noise]), encoding="utf-8", errors="surrogatepass")
        error = None
        with _deadline():
            try:
                assert load_profile(path).name
            except ProfileError as exc:
                error = str(exc)
        if error is not None:
            assert str(path) in error
            assert "Traceback" not in error
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_profile_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_bytes(b'name = "\xff\xfe"\n')
    with pytest.raises(ProfileError, match=str(path)):
        load_profile(path)
