"""The config claims: expected config.json fields, and drafter-versus-target compatibility."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specgate.claims import ids, inputs
from specgate.claims import result as claims
from specgate.claims.result import ClaimResult
from specgate.core.errors import CheckpointError
from specgate.core.profile import Profile
from specgate.io.checkpoint import aux_layer_ids, load_target_config, num_aux_states, read_config

PHASE = "phase0"
OVERWRITE_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
_MISSING = object()


def config_field_ids(profile: Profile) -> list[str]:
    """The [drafter.expect] keys, in profile order: one config.<key> claim each."""
    return list(profile.drafter.expect)


def config_field_claims(profile: Profile) -> list[ClaimResult]:
    return [config_field_claim(profile, key) for key in config_field_ids(profile)]


# The last config.json read for config.<field> claims, by its file, with (inode, size, mtime):
# a profile with thousands of [drafter.expect] keys reads the file once, not once a key.
_last_config: dict[Path, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def _config_of(folder: Path) -> dict[str, Any]:
    """read_config(folder), kept while config.json stays the same file with the same size and
    modification time. The claims only look values up in it."""
    file = folder / "config.json" if folder.is_dir() else folder
    try:
        st = file.stat()
        stamp: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        stamp = None
    kept = _last_config.get(file)
    if stamp is not None and kept is not None and kept[0] == stamp:
        return kept[1]
    config = read_config(folder)
    _last_config.clear()
    if stamp is not None:
        _last_config[file] = (stamp, config)
    return config


def lookup(config: dict[str, Any], key: str) -> Any:
    """config[key], or the nested field a dotted key reaches; _MISSING when absent."""
    if key in config:
        return config[key]
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _same(found: Any, expected: Any) -> bool:
    if isinstance(found, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(found) == len(expected) and all(map(_same, found, expected))
    if isinstance(found, bool) or isinstance(expected, bool):
        return found is expected
    return bool(found == expected)


def config_field_claim(profile: Profile, key: str) -> ClaimResult:
    cid = f"config.{key}"
    expected = profile.drafter.expect.get(key, _MISSING)
    if expected is _MISSING:
        return claims.broken(cid, PHASE, f"[drafter.expect] has no key {key!r}")
    loaded = inputs.prepare(profile, cid, PHASE, ["drafter"], lambda a: (a, _config_of(a)))
    if isinstance(loaded, ClaimResult):
        return loaded
    folder, config = loaded
    file = folder / "config.json" if folder.is_dir() else folder
    found = lookup(config, key)
    if found is _MISSING:
        return claims.failed(cid, PHASE, f"{file}: config.json has no field {key!r}; expected "
                             f"{expected!r} ([drafter.expect] in the profile)",
                             observed=None, expected=expected, reason="missing_field")
    if _same(found, expected):
        return claims.passed(cid, PHASE, f"{file}: {key} = {found!r}", observed=found,
                             expected=expected)
    text = f"{file}: {key} is {found!r}, expected {expected!r}"
    why, details = "wrong_value", {}
    if key == "max_position_embeddings" and _smaller(found, expected):
        why, details = "context_too_short", {"overwrite_env": OVERWRITE_ENV}
        text += (f". SGLang refuses to start when the draft context is shorter than the "
                 f"target's unless {OVERWRITE_ENV}=1; set max_position_embeddings to the "
                 f"target's context ({expected}) in config.json, or set "
                 f'{OVERWRITE_ENV} = "1" in [server] env')
    elif key.endswith("eagle_aux_hidden_state_layer_ids"):
        why = "aux_layer_ids_differ"
        text += (". On DeepSeek-V3/Kimi targets SGLang shifts ids by one only when the first id "
                 "is 1, so [1, 29, 57] and [2, 30, 58] capture the same layers; otherwise the "
                 "drafter reads hidden states it was not trained on")
    return claims.failed(cid, PHASE, text, observed=found, expected=expected, reason=why,
                         details=details)


def _smaller(found: Any, expected: Any) -> bool:
    return isinstance(found, (int, float)) and isinstance(expected, (int, float)) and \
        found < expected


def target_compat_problems(drafter: dict[str, Any], target: dict[str, Any], *,
                           context_length: int | None = None) -> tuple[
        list[str], list[str], dict[str, list[Any]]]:
    """Mismatches between a drafter config and its target's, the checks that passed, and every
    check made: code (hidden_size, vocab_size, aux_layer_ids, max_position_embeddings) →
    [drafter's value, target's value, ok]. context_length is the server's --context-length,
    which caps the context SGLang serves the target at."""
    problems: list[str] = []
    passed: list[str] = []
    checks: dict[str, list[Any]] = {}

    def compare(what: str, mine: Any, theirs: Any, ok: bool, advice: str, code: str) -> None:
        if mine is None or theirs is None:
            return
        checks[code] = [mine, theirs, ok]
        if ok:
            passed.append(f"{what} {mine}")
        else:
            problems.append(f"{what}: drafter {mine} vs target {theirs}; {advice}")

    th = drafter.get("target_hidden_size") or drafter.get("hidden_size")
    t_hidden = target.get("hidden_size")
    compare("hidden size (fc input per aux state)", th, t_hidden, th == t_hidden,
            f"fc expects {num_aux_states(drafter)}×{th} inputs: the drafter was trained for "
            "another target", "hidden_size")
    vocab, t_vocab = drafter.get("vocab_size"), target.get("vocab_size")
    compare("vocab_size", vocab, t_vocab, vocab == t_vocab,
            "d2t would map draft tokens to the wrong target ids", "vocab_size")
    ids = aux_layer_ids(drafter)
    layers = target.get("num_hidden_layers")
    if ids is not None and isinstance(layers, int):
        outside = [i for i in ids if not 0 <= i < layers]
        compare("aux layer ids", ids, f"{layers} layers", not outside,
                f"ids {outside} are outside the target's layers 0..{layers - 1}",
                "aux_layer_ids")
    pos, t_pos = drafter.get("max_position_embeddings"), target.get("max_position_embeddings")
    if isinstance(pos, int) and isinstance(t_pos, int):
        served: int | str = t_pos
        if context_length is not None and context_length < t_pos:
            served = f"{t_pos}, served at --context-length {context_length}"
            t_pos = context_length
        compare("max_position_embeddings", pos, served, pos >= t_pos,
                f"SGLang refuses to start unless {OVERWRITE_ENV}=1 or --context-length ≤ {pos}; "
                f"set the drafter's max_position_embeddings to {t_pos}",
                "max_position_embeddings")
    return problems, passed, checks


def served_context_length(args: list[str]) -> int | None:
    """The --context-length among the server's launch arguments (SGLang's own spelling, with a
    space or '='), or None."""
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag != "--context-length":
            continue
        text = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        try:
            return int(text)
        except ValueError:
            return None
    return None


def target_compat_claim(profile: Profile) -> ClaimResult:
    cid = ids.TARGET_COMPAT.id
    loaded = inputs.prepare(profile, cid, PHASE, ["drafter", "target"], lambda a, b: (
        a, b, read_config(a), load_target_config(b)))
    if isinstance(loaded, ClaimResult):
        return loaded
    folder, target_path, drafter, target = loaded
    try:
        problems, ok, checks = target_compat_problems(
            drafter, target, context_length=served_context_length(profile.server.args))
    except CheckpointError as exc:  # a garbled field, e.g. aux layer ids that are not integers
        return claims.broken(cid, PHASE, f"{folder / 'config.json'}: {exc}")
    details = {"problems": problems, "passed": ok, "checks": checks,
               "mismatched": [code for code, (_, _, good) in checks.items() if not good]}
    if problems:
        return claims.failed(cid, PHASE, f"{folder} vs target {target_path}: "
                             + "; ".join(problems), observed=len(problems), expected=0,
                             unit="mismatches", details=details)
    if not ok:
        return claims.broken(cid, PHASE, f"{target_path}: config has none of hidden_size, "
                             "vocab_size, num_hidden_layers, max_position_embeddings; is it a "
                             "model config.json?", reason="not_a_model_config")
    return claims.passed(cid, PHASE, f"{folder} fits target {target_path}: " + ", ".join(ok),
                         observed=0, expected=0, unit="mismatches", details=details)
