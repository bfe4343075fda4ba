"""Profiles: validation messages, overrides, shipped profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specgate.core.errors import ProfileError
from specgate.core.profile import (
    Profile,
    choose_profile_path,
    load_profile,
    parse_profile,
    shipped_profile_names,
    shipped_profiles_dir,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "specgate" / "profiles").glob("*.toml")),
                         ids=lambda p: p.name)
def test_shipped_profiles_load(path: Path) -> None:
    profile = load_profile(path)
    assert profile.name
    assert profile.speculative.algorithm == "EAGLE3"


def test_kimi_profile_carries_the_seeds_deployment() -> None:
    p = load_profile(ROOT / "specgate" / "profiles" / "kimi-k2.5-8x-rtx-pro-6000.toml")
    assert p.server.tp == 8
    assert (p.speculative.num_steps, p.speculative.eagle_topk, p.speculative.num_draft_tokens) == (
        2, 1, 3)
    assert p.thresholds.baseline_tps_min == 82.0
    assert p.thresholds.accept_len_min == 2.46
    expect = p.drafter.expect
    assert expect["hidden_size"] == 7168
    assert expect["draft_vocab_size"] == 32000
    assert expect["eagle_config.eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert not p.is_simulated


def test_demo_profile_is_simulated() -> None:
    assert load_profile(ROOT / "specgate" / "profiles" / "demo.toml").is_simulated


def test_typo_in_key_names_file_key_and_suggestion(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('name = "x"\n[server]\nprot = 3000\n')
    with pytest.raises(ProfileError) as err:
        load_profile(f)
    text = str(err.value)
    assert str(f) in text
    assert "server.prot" in text
    assert "did you mean 'port'" in text


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="not found"):
        load_profile(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(bad)


def test_wrong_type_names_key_and_found_value() -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile({"name": "x", "server": {"tp": "eight"}})
    assert "server.tp" in str(err.value)
    assert "'eight'" in str(err.value)


def test_missing_name_is_reported() -> None:
    with pytest.raises(ProfileError, match="'name' is required"):
        parse_profile({})


@pytest.mark.parametrize("spec", [
    {"num_steps": 2},
    {"num_steps": 2, "eagle_topk": 1},
    {"num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 4},
])
def test_speculative_steps_rules(spec: dict[str, int]) -> None:
    with pytest.raises(ProfileError):
        parse_profile({"name": "x", "speculative": spec})


def test_overrides_apply_and_resolve_against_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    monkeypatch.chdir(tmp_path)
    p = parse_profile({"name": "x", "drafter": {"path": "a"}}, source=tmp_path / "sub" / "p.toml")
    assert p.resolve(p.drafter.path) == (tmp_path / "sub" / "a").resolve()
    q = p.with_overrides(drafter="d", sglang_launcher="ssh gpu-box python -m sglang.launch_server",
                         server_url="http://127.0.0.1:1")
    assert q.resolve(q.drafter.path) == (tmp_path / "d").resolve()
    assert q.server.launcher[:2] == ["ssh", "gpu-box"]
    assert q.server.url == "http://127.0.0.1:1"
    assert p.drafter.path == "a"  # the original is untouched


def test_profile_choice_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECGATE_PROFILE", str(tmp_path / "env.toml"))
    assert choose_profile_path(None) == tmp_path / "env.toml"
    assert choose_profile_path("given.toml") == Path("given.toml")
    monkeypatch.delenv("SPECGATE_PROFILE")
    assert choose_profile_path(None).name == "demo.toml"


def test_every_shipped_profile_is_found_by_its_name(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    names = shipped_profile_names()
    assert "kimi-k2.5-8x-rtx-pro-6000" in names  # a name with a dot in it
    for name in names:
        assert choose_profile_path(name) == shipped_profiles_dir() / f"{name}.toml"
        assert load_profile(choose_profile_path(name)).source == str(
            shipped_profiles_dir() / f"{name}.toml")
    # A file of that name in the working folder is the user's, and wins.
    (tmp_path / "demo").write_text('name = "mine"\n')
    assert choose_profile_path("demo") == Path("demo")


@given(st.dictionaries(st.text(min_size=1, max_size=12), st.integers(), max_size=4))
def test_unknown_top_level_keys_always_rejected(extra: dict[str, int]) -> None:
    known = set(Profile.model_fields)
    extra = {k: v for k, v in extra.items() if k not in known}
    data = {"name": "x", **extra}
    if not extra:
        assert parse_profile(data).name == "x"
        return
    with pytest.raises(ProfileError, match="unknown key"):
        parse_profile(data)


def test_a_value_fitting_no_branch_of_a_union_gives_one_plain_line() -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile({"name": "x", "thresholds": {"accept_len_min": "brekeven"}})
    lines = str(err.value).splitlines()
    assert lines == ["<profile>: key 'thresholds.accept_len_min' is 'brekeven'; expected a number "
                     'or "breakeven" (did you mean "breakeven"?)']


def test_union_errors_merge_per_key_and_keep_other_keys_in_order() -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile({"name": "x", "server": {"tp": "eight"},
                       "thresholds": {"accept_len_min": [2], "t2d_match_min": "a"}})
    lines = str(err.value).splitlines()
    assert len(lines) == 3
    assert "server.tp" in lines[0]
    assert lines[1] == ("<profile>: key 'thresholds.accept_len_min' is [2]; expected a number "
                        'or "breakeven"')
    assert "thresholds.t2d_match_min" in lines[2]


@given(st.one_of(st.text(max_size=12), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_union_keys_never_show_pydantic_branch_names(value: object) -> None:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        pass
    else:
        return  # a string pydantic parses as a number is a valid value
    if value == "breakeven":
        return
    with pytest.raises(ProfileError) as err:
        parse_profile({"name": "x", "thresholds": {"accept_len_min": value}})
    text = str(err.value)
    assert len(text.splitlines()) == 1
    assert "key 'thresholds.accept_len_min' is " in text
    assert "literal[" not in text
    assert "accept_len_min.float" not in text


def test_keys_of_free_form_tables_are_kept() -> None:
    with pytest.raises(ProfileError) as err:
        parse_profile({"name": "x", "server": {"env": {"NCCL_PROTO": 1}}})
    assert "key 'server.env.NCCL_PROTO'" in str(err.value)


def test_eval_section_defaults_and_bounds() -> None:
    section = parse_profile({"name": "t"}).eval
    assert (section.hidden_states, section.tolerance, section.min_tokens) == (None, 0.10, 200)
    with pytest.raises(ProfileError, match=r"key 'eval\.tolerance'.*found 1\.5"):
        parse_profile({"name": "t", "eval": {"tolerance": 1.5}})
    with pytest.raises(ProfileError, match=r"unknown key 'eval\.dump' in \[eval\]"):
        parse_profile({"name": "t", "eval": {"dump": "x"}})


def test_concurrency_levels_default_to_one_stream_and_the_gate_to_the_smallest() -> None:
    plain = parse_profile({"name": "x"})
    assert plain.bench.concurrency == [1]
    assert plain.gate_concurrency == 1
    levels = parse_profile({"name": "x", "bench": {"concurrency": [16, 1, 4]}})
    assert levels.bench.concurrency == [1, 4, 16]
    assert levels.gate_concurrency == 1
    chosen = parse_profile({"name": "x", "bench": {"concurrency": [1, 4, 16]},
                            "thresholds": {"gate_concurrency": 4}})
    assert chosen.gate_concurrency == 4


@pytest.mark.parametrize(("bench", "thresholds", "says"), [
    ({"concurrency": [1, 4]}, {"gate_concurrency": 8},
     "key 'thresholds.gate_concurrency' is 8; expected one of the [bench] concurrency levels "
     "[1, 4]"),
    ({}, {"gate_concurrency": 4}, "expected one of the [bench] concurrency levels [1]"),
    ({"concurrency": [1, 4, 4]}, {}, "key 'bench.concurrency': Value error, each level may "
                                     "appear once"),
    ({"concurrency": [0, 4]}, {}, "every level must be a whole number from 1 to 1024"),
    ({"concurrency": []}, {}, "key 'bench.concurrency'"),
    ({"concurrency": 4}, {}, "key 'bench.concurrency'"),
    ({"concurrency": [1, 4], "design": "interleaved"}, {},
     "design = \"interleaved\" sends one request at a time"),
])
def test_bad_concurrency_names_the_file_and_key(tmp_path: Path, bench: dict[str, object],
                                                thresholds: dict[str, object],
                                                says: str) -> None:
    f = tmp_path / "p.toml"
    lines = ['name = "x"', "[bench]", *(f"{k} = {v!r}" for k, v in bench.items()),
             "[thresholds]", *(f"{k} = {v!r}" for k, v in thresholds.items())]
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProfileError) as err:
        load_profile(f)
    assert str(err.value).startswith(f"{f}: ")
    assert says in str(err.value)


def test_demo_concurrency_shows_three_levels_and_gates_at_one() -> None:
    p = load_profile(ROOT / "specgate" / "profiles" / "demo-concurrency.toml")
    assert p.bench.concurrency == [1, 4, 16]
    assert p.gate_concurrency == 1
    assert p.is_simulated
