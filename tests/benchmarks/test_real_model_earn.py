"""benchmarks/real_model/sf_train.py's data order and batches, and earn.py's generation loop (a
stand-in for SGLang's /generate): the smaller data sets are prefixes of the larger one, every
sample is in exactly one batch, and generation stops handing out batches once enough answer
tokens are in, keeping the answers in prompt order. Where SpecForge 0.2.0 can be imported
($SPECFORGE_ROOT: an unpacked wheel), two runs of the same training command write the same
weights."""

from __future__ import annotations

import gzip
import json
import os
import random
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
from script_support import load_real_model_script


@pytest.fixture(scope="module")
def sf_train() -> ModuleType:
    return load_real_model_script("sf_train")


@pytest.fixture(scope="module")
def earn() -> ModuleType:
    return load_real_model_script("earn")


def test_smaller_data_sets_are_prefixes_of_the_seeded_order(sf_train: ModuleType) -> None:
    order = sf_train.data_order(900, 0)
    assert sorted(order) == list(range(900))
    assert order == sf_train.data_order(900, 0)
    assert order != sf_train.data_order(900, 1)
    ninth, third = set(order[:100]), set(order[:300])
    assert ninth < third < set(order)


def test_every_sample_is_in_one_batch_of_similar_lengths(sf_train: ModuleType) -> None:
    rng = random.Random(5)
    lengths = [rng.randrange(10, 900) for _ in range(203)]
    got = sf_train.batches(lengths, 16, random.Random(1))
    flat = [i for b in got for i in b]
    assert sorted(flat) == list(range(203))
    assert sorted(len(b) for b in got) == [11] + [16] * 12
    # length-sorted buckets: a batch spans far less than the whole range of lengths
    assert max(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in got) < 200
    assert got == sf_train.batches(lengths, 16, random.Random(1))
    assert got != sf_train.batches(lengths, 16, random.Random(2))


def test_rows_without_an_answer_are_left_out_and_bad_rows_are_named(
        sf_train: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"prompt_ids": [1, 2], "answer_ids": [3, 4]}) + "\n")
        f.write(json.dumps({"prompt_ids": [1], "answer_ids": []}) + "\n")
    assert len(sf_train.read_rows(path)) == 1
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"prompt_ids": "1 2", "answer_ids": [3]}) + "\n")
    with pytest.raises(SystemExit, match=r"answers.jsonl.gz:1: no prompt_ids list"):
        sf_train.read_rows(path)


class _Server:
    """/generate's stand-in: each prompt's answer is `per_prompt` tokens."""

    def __init__(self, per_prompt: int) -> None:
        self.per_prompt = per_prompt
        self.requests = 0
        self.lock = threading.Lock()

    def post(self, url: str, body: dict[str, Any], timeout_s: float = 0.0) -> Any:
        with self.lock:
            self.requests += 1
        first = body["input_ids"]
        return [{"output_ids": [p[0]] * self.per_prompt, "meta_info": {
            "finish_reason": {"type": "length"}}} for p in first]


def _serial(earn: ModuleType, monkeypatch: pytest.MonkeyPatch, post: Any) -> Any:
    """An Earn whose generation posts to `post`, one batch of 4 prompts at a time."""
    monkeypatch.setattr(earn.gen, "post", post)
    monkeypatch.setattr(earn.gen, "THREADS", 1)
    monkeypatch.setattr(earn.gen, "BATCH", 4)
    return object.__new__(earn.Earn)


def test_generation_stops_handing_out_batches_once_enough_tokens_are_in(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _Server(per_prompt=10)
    runner = _serial(earn, monkeypatch, server.post)
    prompts = [[i] for i in range(100)]  # 25 batches of 4 prompts, 40 tokens each
    out = runner.spread(["http://a"], prompts, 10, until_tokens=200)
    assert server.requests == 5  # 5 batches = 200 tokens; the 6th is never sent
    assert [o["output_ids"][0] for o in out] == list(range(20))
    everything = runner.spread(["http://a", "http://b"], prompts, 10)
    assert [o["output_ids"][0] for o in everything] == list(range(100))


def test_generation_sends_no_batch_once_told_to_stop(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    server = _Server(per_prompt=10)
    runner = _serial(earn, monkeypatch, server.post)
    out = runner.spread(["http://a"], [[i] for i in range(100)], 10,
                        stop=lambda: server.requests >= 3)
    assert server.requests == 3
    assert [o["output_ids"][0] for o in out] == list(range(12))


def test_answers_are_kept_in_order_up_to_the_first_batch_not_sent(earn: ModuleType) -> None:
    """A later batch answered while an earlier one was never sent is left out: the answers
    stay those of the first prompts."""
    a, b, c = ([{"output_ids": [k]}] for k in (1, 2, 3))
    assert earn.gen.sent_in_order([a, b, None, c]) == a + b
    assert earn.gen.sent_in_order([None, a]) == []
    assert earn.gen.sent_in_order([a, b, c]) == a + b + c


def test_the_writing_stops_at_its_share_of_the_generation_time_and_the_answers_at_the_end(
        earn: ModuleType) -> None:
    clock = [1000.0]
    write, answer = earn.gen_stops(1100.0, now=lambda: clock[0])
    assert write is not None
    assert answer is not None
    clock[0] = 1000.0 + 100 * earn.WRITE_SHARE - 0.5
    assert not write()
    assert not answer()
    clock[0] = 1000.0 + 100 * earn.WRITE_SHARE
    assert write()
    assert not answer()
    clock[0] = 1100.0
    assert write()
    assert answer()
    assert earn.gen_stops(None) == (None, None)
    clock[0] = 1000.0
    half_write, _ = earn.gen_stops(1100.0, now=lambda: clock[0], share=0.5)
    assert half_write is not None
    clock[0] = 1049.0
    assert not half_write()
    clock[0] = 1050.0
    assert half_write()
    late_write, late_answer = earn.gen_stops(900.0, now=lambda: clock[0])  # already past
    assert late_write is not None
    assert late_answer is not None
    assert late_write()
    assert late_answer()


class _Tokenizer:
    """transformers' tokenizer, as far as earn.py's data stage uses it: a chat is one token id
    per distinct text, and a written answer decodes to a request of usable length."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def apply_chat_template(self, messages: list[dict[str, str]], **_kw: Any) -> list[int]:
        return [self.ids.setdefault(messages[0]["content"], len(self.ids) + 1)]

    def encode(self, text: str) -> list[int]:
        return [self.ids.setdefault(text, len(self.ids) + 1)]

    def decode(self, ids: list[int], **_kw: Any) -> str:
        return (f"What would a careful engineer check first when request number {ids[0]} "
                "comes back slower than it did yesterday?")


class _Fleet:
    def __init__(self, *_a: Any) -> None:
        self.urls = ["http://a"]
        self.failed: list[str] = []

    def wait_first(self) -> str:
        return "http://a"

    def stop(self) -> list[Any]:
        return []


def _data_runner(earn: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                 gen_deadline: float | None, clock: list[float]) -> Any:
    """earn.py's data stage against stand-ins for SGLang (each /generate request moves the
    clock 10 s on), transformers' tokenizer and the generation servers."""
    import argparse
    import sys
    from types import SimpleNamespace

    from specgate.results import prompts as probe_prompts

    def post(url: str, body: dict[str, Any], timeout_s: float = 0.0) -> Any:
        clock[0] += 10.0
        return [{"output_ids": [p[0], 7, 7], "meta_info": {"finish_reason": {"type": "stop"}}}
                for p in body["input_ids"]]

    runner = _serial(earn, monkeypatch, post)
    monkeypatch.setattr(earn.gen, "generate", lambda url, texts, *_a, **_k: [
        {"output_ids": [5, 6]} for _ in texts])
    monkeypatch.setattr(earn, "Fleet", _Fleet)
    tok = _Tokenizer()
    # the data stage imports transformers' AutoTokenizer when it runs (installed or not here)
    monkeypatch.setitem(sys.modules, "transformers", SimpleNamespace(
        AutoTokenizer=SimpleNamespace(from_pretrained=lambda *_a, **_k: tok)))
    monkeypatch.setattr(probe_prompts, "choose_template", lambda *_a: SimpleNamespace(
        name="plain", source="test", render=lambda text: text))
    runner.a = argparse.Namespace(
        n_tasks=12, n_written=40, seed=0, write_tokens=8, write_temperature=0.7,
        write_top_p=0.95, train_tokens=8, answer_tokens=10_000, gen_servers=1,
        gen_mem_fraction=0.25, gen_deadline=gen_deadline, write_share=0.5)
    runner.work = tmp_path
    runner.target = tmp_path / "target"
    runner.sim = True
    runner.out = tmp_path / "out"
    runner.out.mkdir()
    runner.rec = {"seconds": {}, "errors": {}}
    runner.lap_t = 0.0
    runner.answers_path = tmp_path / "answers.jsonl.gz"
    runner.heldout_dir = tmp_path / "dumps" / "heldout"
    runner.now = lambda: clock[0]
    monkeypatch.setattr(runner, "gen_profile", lambda index=0: SimpleNamespace(
        bench=SimpleNamespace(chat_template=None), server=SimpleNamespace(args=[])))
    return runner


def test_the_data_stage_stops_writing_and_answering_at_the_generation_deadline(
        earn: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline 100 s away with half for the writing: 5 batches of 4 asks written (the clock
    at 50 s), then 5 batches of 4 answers (at 100 s) of the 32 prompts there were."""
    clock = [0.0]
    runner = _data_runner(earn, tmp_path, monkeypatch, 100.0, clock)
    runner.data()
    rec = json.loads((tmp_path / "earn.json").read_text())
    assert rec["written"]["requests"] == 40
    assert rec["written"]["written"] == 20
    assert rec["written"]["kept"] == 20
    assert rec["answers"]["prompts"] == 20
    assert rec["answers"]["stopped_by_gen_deadline"] is True
    with gzip.open(tmp_path / "answers.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 20
    assert {r["family"] for r in rows} == {"written", "tasks"}


def test_the_data_stage_without_a_deadline_answers_every_prompt(
        earn: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _data_runner(earn, tmp_path, monkeypatch, None, [0.0])
    runner.data()
    rec = json.loads((tmp_path / "earn.json").read_text())
    assert rec["written"]["written"] == 40
    assert rec["answers"]["prompts"] == 40 + 12
    assert rec["answers"]["stopped_by_gen_deadline"] is False


def test_a_data_stage_that_got_no_answer_in_time_says_so(
        earn: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _data_runner(earn, tmp_path, monkeypatch, 100.0, [100.0])
    with pytest.raises(RuntimeError, match=r"no answers: .* before --gen-deadline"):
        runner.data()


@pytest.mark.slow
def test_the_same_training_command_writes_the_same_weights(
        sf_train: ModuleType, tmp_path: Path) -> None:
    root = os.environ.get("SPECFORGE_ROOT")
    if not root:
        pytest.skip("SpecForge 0.2.0 is not importable here: set SPECFORGE_ROOT to an unpacked "
                    "specforge-0.2.0 wheel")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("triton", reason="SpecForge 0.2.0's loss imports triton, which comes "
                        "with CUDA builds of torch")
    vocab = load_real_model_script("vocab")
    from collections import Counter

    from safetensors.numpy import save_file

    cfg = transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
        tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(str(tmp_path / "t"))
    rng = random.Random(0)
    rows = [{"prompt_ids": [rng.randrange(3, 128) for _ in range(6)],
             "answer_ids": [rng.randrange(3, 60) for _ in range(rng.randrange(4, 20))]}
            for _ in range(24)]
    data = tmp_path / "answers.jsonl.gz"
    with gzip.open(data, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    d2t, t2d = vocab.mappings(Counter(t for r in rows for t in r["answer_ids"]), 32, 128)
    save_file({"d2t": d2t, "t2d": t2d}, str(tmp_path / "map.safetensors"))
    sums = []
    for k in (1, 2):
        args = ["--data", str(data), "--target", str(tmp_path / "t"), "--vocab-map",
                str(tmp_path / "map.safetensors"), "--out", str(tmp_path / f"d{k}"),
                "--specforge", root, "--epochs", "1", "--batch-rows", "8", "--ttt", "3",
                "--device", "cpu", "--log-every", "0"]
        assert sf_train.main(args) == 0
        sums.append(json.loads((tmp_path / f"d{k}" / "summary.json").read_text()))
    assert sums[0]["sha256"] == sums[1]["sha256"]
    assert sums[0]["updates"] == 3
    assert sums[0]["epochs_done"] == 1


def test_the_report_sets_the_accept_length_each_chain_needs_against_what_it_reached(
        tmp_path: Path) -> None:
    rep = load_real_model_script("earn_report")
    out = tmp_path / "out"
    (out / "drafters" / "trained").mkdir(parents=True)
    (out / "tune").mkdir()
    (out / "probe-1").mkdir()
    (out / "earn.json").write_text(json.dumps({"served_steps": 2, "served_sizes": {
        "trained": {"accept_len": 1.9}}}))
    (out / "drafters" / "trained" / "summary.json").write_text(json.dumps(
        {"answer_tokens": 1000, "samples": 10, "sha256": "ab" * 32}))
    (out / "drafters" / "trained" / "prediction.json").write_text(json.dumps(
        {"groups": {"all": {"predicted_per_request": {"steps2_topk1_draft3": 1.8}}}}))
    (out / "probe-2").mkdir()
    for k, tps in ((1, 600.0), (2, 500.0)):
        (out / f"probe-{k}" / "verdict.json").write_text(json.dumps(
            {"outcome": "failed", "claims": [], "figures": {"baseline_tps": {"value": tps}}}))
    (out / "tune" / "tune.json").write_text(json.dumps({
        "best": "s2-k1-d3", "stop_reason": "interrupted after 1 launches",
        "cycle_fit": {"how": "one measured configuration, cycle ∝ steps + 1 (no baseline)"},
        "predictions": {"s1-k1-d2": {"tau": 1.5, "cycle_ms": 3.0},
                                            "s2-k1-d3": {"tau": 1.7, "cycle_ms": 3.5}},
        "trials": [{"key": "s2-k1-d3", "run": {"measurement": {"stats": {
            "cycle_ms": {"mean": 4.0}, "tau_decode": {"mean": 1.9}}}}}]}))
    text, curve = rep.report(out)
    # launched: the measured cycle 4.0 ms x 600 (500) tok/s = 2.4 (2.0) needed, 1.9 reached
    assert "| s2-k1-d3 | yes | 4.00 | 2.400 / 2.000 | 1.900 | 1.800 | 0.500 / 0.100 |" in text
    # not launched: the tune's model, 3.0 ms x 600 (500) = 1.8 (1.5) needed against 1.5
    assert "| s1-k1-d2 | no (predicted) | 3.00 | 1.800 / 1.500 | 1.500 | — | 0.300 / 0.000 |" \
        in text
    # the cycle model of the chains not launched is named, and why the race stopped
    assert "Best: s2-k1-d3 (interrupted after 1 launches)" in text
    assert "(one measured configuration, cycle ∝ steps + 1 (no baseline))" in text
    assert curve == [(1000.0, 1.9, 1.8, "trained")]
    assert "Not served: ninth, third (no trained drafter;" in text


def _served_run(out: Path, steps: int, served: dict[str, float], judged: str = "trained",
                breakeven: float | None = None) -> Path:
    """An earn.py OUT: the sizes in `served` trained (answer tokens by size) and served."""
    tokens = {"ninth": 100, "third": 300, "trained": 900}
    for name, got in served.items():
        (out / "drafters" / name).mkdir(parents=True)
        (out / "drafters" / name / "summary.json").write_text(json.dumps(
            {"answer_tokens": tokens[name]}))
        (out / "drafters" / name / "prediction.json").write_text(json.dumps(
            {"groups": {"all": {"predicted_per_request": {
                f"steps{steps}_topk1_draft{steps + 1}": got - 0.01}}}}))
    (out / "earn.json").write_text(json.dumps({"served_steps": steps, "judged": judged,
        "served_sizes": {n: {"accept_len": g} for n, g in served.items()}}))
    if breakeven is not None:
        (out / "probe-1").mkdir()
        (out / "probe-1" / "verdict.json").write_text(json.dumps(
            {"outcome": "failed", "claims": [], "figures": {"breakeven": {"value": breakeven}}}))
    return out


def test_the_data_size_curve_takes_the_sizes_another_run_served_at_the_same_chain(
        tmp_path: Path) -> None:
    rep = load_real_model_script("earn_report")
    here = _served_run(tmp_path / "here", 4, {"ninth": 1.25}, judged="ninth", breakeven=2.53)
    same = _served_run(tmp_path / "same-chain", 4, {"third": 1.42, "ninth": 1.3})
    other = _served_run(tmp_path / "other-chain", 1, {"trained": 1.4})
    text, curve = rep.report(here, (other, same))
    # this run's ninth, not the other run's; the other run's third; nothing served at 1 step
    assert curve == [(100.0, 1.25, 1.24, "ninth"), (300.0, 1.42, 1.41, "third (same-chain)")]
    assert "| third (same-chain) | 300 | 1.420 | 1.410 |" in text
    assert "Not served: trained (" in text
    assert "Drafter: ninth." in text
    assert "Break-even at 4 steps: 2.530 (probe-1): the accept length" in text


def test_a_second_run_is_compared_only_when_both_runs_finished_their_epochs(
        earn: ModuleType) -> None:
    done = {"epochs": 1, "epochs_done": 1, "updates": 94}
    got = earn.reproduced({
        "ninth": {**done, "sha256": "aa"}, "ninth-again": {**done, "sha256": "aa"},
        "third": {**done, "sha256": "bb"}, "third-again": {**done, "sha256": "cc"},
        "trained": {**done, "sha256": "dd"},
        "trained-again": {"epochs": 1, "epochs_done": 0, "updates": 300, "sha256": "ee",
                          "stopped": "SIGTERM after update 300 of 844"}})
    assert got["ninth"]["same"] is True
    assert got["third"]["same"] is False
    assert got["trained"]["same"] is None
    assert got["trained"]["why"] == "not compared: trained-again did not finish its epochs"
    assert got["trained"]["updates"] == [94, 300]
    # a second run without its first names nothing
    assert earn.reproduced({"ninth-again": {**done, "sha256": "aa"}}) == {}


def test_training_names_are_sizes_or_their_second_runs(earn: ModuleType) -> None:
    import argparse

    assert earn.names_arg("trained, third,ninth-again") == ["trained", "third", "ninth-again"]
    assert earn.base_name("trained-again") == "trained"
    with pytest.raises(argparse.ArgumentTypeError, match=r"'half': a training is one of"):
        earn.names_arg("trained,half")


def test_the_report_says_which_second_runs_wrote_the_same_bytes(tmp_path: Path) -> None:
    rep = load_real_model_script("earn_report")
    out = tmp_path / "out"
    for name in ("ninth", "ninth-again", "trained"):
        (out / "drafters" / name).mkdir(parents=True)
        (out / "drafters" / name / "summary.json").write_text(json.dumps(
            {"answer_tokens": 10, "sha256": "ab" * 32 if "ninth" in name else "cd" * 32}))
    (out / "earn.json").write_text(json.dumps({
        "sha256_reproduced": {"ninth": {"same": True, "first": "ab" * 32, "again": "ab" * 32}},
        "again_skipped": "trained-again: not started, 100 s left"}))
    text, _ = rep.report(out)
    drafters = text.split("## Drafters")[1].split("The same command")[0]
    rows = [line.split(" | ")[0] for line in drafters.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["| trained", "| ninth", "| ninth-again"]
    assert f"- ninth: the same sha256 (`{'ab' * 8}…`, `{'ab' * 8}…`)" in text
    assert "- trained-again: not started, 100 s left" in text


def test_the_report_says_when_the_generation_deadline_cut_the_data(tmp_path: Path) -> None:
    rep = load_real_model_script("earn_report")
    out = tmp_path / "out"
    out.mkdir()
    (out / "earn.json").write_text(json.dumps({
        "written": {"requests": 300, "written": 120, "kept": 110, "tokens": 900},
        "answers": {"prompts": 50, "answer_tokens": 700, "stopped_by_gen_deadline": True}}))
    data = rep.report(out)[0].split("## Data")[1].split("## Drafters")[0]
    assert "- the writing stopped at its share of the generation time: 120 of 300 asks" in data
    assert "700 answer tokens" in data
    assert "(stopped by the generation deadline)" in data
    (out / "earn.json").write_text(json.dumps({
        "written": {"requests": 300, "written": 300, "kept": 280, "tokens": 900},
        "answers": {"prompts": 50, "answer_tokens": 700, "stopped_by_gen_deadline": False}}))
    data = rep.report(out)[0].split("## Data")[1].split("## Drafters")[0]
    assert "stopped" not in data


def test_each_generation_server_is_given_its_share_of_what_the_others_left(
        earn: ModuleType) -> None:
    got = [earn.gen_memory_fraction(0.25, i) for i in range(3)]
    assert got == [0.25, 0.3333, 0.5]
    free = 1.0
    for f in got:  # each takes its fraction of what is free when it starts
        free -= f * free
    assert free == pytest.approx(0.25, abs=1e-4)
    with pytest.raises(ValueError, match=r"3 generation servers of 0\.4 of the GPU each do not"):
        earn.gen_memory_fraction(0.4, 2)


def test_trainings_at_once_are_what_the_gpu_memory_holds(earn: ModuleType) -> None:
    assert earn.trainings_at_once(0, 139.8, 64) == 2  # a 141 GB H200
    assert earn.trainings_at_once(0, 79.6, 64) == 1  # an 80 GB H100: two would need ~84 GiB
    assert earn.trainings_at_once(0, 79.6, 32) == 2  # half the batch, half the memory
    assert earn.trainings_at_once(0, 200.0, 16) == 2  # never more than two
    assert earn.trainings_at_once(0, 20.0, 64) == 1  # too small for one: still one
    assert earn.trainings_at_once(0, None, 64) == 1  # no GPU found
    assert earn.trainings_at_once(3, 79.6, 64) == 3  # asked for


def _held(tmp_path: Path, name: str, code: int = 0, after: int = 0) -> list[str]:
    """A command that says it started, then runs until the test releases it. It exits 9 at once
    if fewer than `after` others had been released when it started (the pool started it too
    early)."""
    import sys

    body = (f"import pathlib, time; d = pathlib.Path({str(tmp_path)!r}); "
            f"early = len(list(d.glob('release-*'))) < {after}; "
            f"(d / 'started-{name}').touch(); "
            f"exec('while not early and not (d / \\'release-{name}\\').exists(): "
            f"time.sleep(0.005)'); "
            f"raise SystemExit(9 if early else {code})")
    return [sys.executable, "-c", body]


def _wait_for(path: Path) -> None:
    import time

    deadline = time.monotonic() + 120.0  # a ceiling on a stuck pool, not a timing
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.005)


def test_the_pool_runs_at_most_its_width_at_once_in_order(
        earn: ModuleType, tmp_path: Path) -> None:
    import concurrent.futures as cf

    logs = tmp_path / "logs"
    logs.mkdir()
    # c may start once one of a, b has been released, d once two have
    commands = {n: _held(tmp_path, n, code, after) for n, code, after in
                (("a", 0, 0), ("b", 4, 0), ("c", 0, 1), ("d", 0, 2))}
    with cf.ThreadPoolExecutor(1) as pool:
        done = pool.submit(earn.run_pool, commands, 2, None, logs, dict(os.environ),
                           lambda _m: None)
        try:
            _wait_for(tmp_path / "started-a")
            _wait_for(tmp_path / "started-b")
            assert not (tmp_path / "started-c").exists()  # two run; c waits for one to end
            (tmp_path / "release-b").touch()
            _wait_for(tmp_path / "started-c")
            assert not (tmp_path / "started-d").exists()
            (tmp_path / "release-a").touch()
            _wait_for(tmp_path / "started-d")
        finally:
            for n in commands:
                (tmp_path / f"release-{n}").touch()
        codes, wall = done.result()
    assert codes == {"a": 0, "b": 4, "c": 0, "d": 0}
    assert sorted(wall) == ["a", "b", "c", "d"]
    assert sorted(p.name for p in logs.iterdir()) == [f"train-{n}.log" for n in "abcd"]


def test_the_pool_starts_nothing_after_the_deadline(earn: ModuleType, tmp_path: Path) -> None:
    import time

    said: list[str] = []
    codes, wall = earn.run_pool({"a": _held(tmp_path, "a")}, 2, time.time() - 1, tmp_path,
                                dict(os.environ), say=said.append)
    assert codes == {"a": None}
    assert wall == {}
    assert not (tmp_path / "started-a").exists()
    assert said == ["training a: not started before the deadline"]


def test_the_pool_stops_what_runs_at_the_deadline(earn: ModuleType, tmp_path: Path) -> None:
    import sys
    import time

    # runs until SIGTERM (an alarm ends it, failing the test, if the pool never stops it)
    body = ("import signal, sys; signal.alarm(300); "
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(4)); signal.pause()")
    said: list[str] = []
    limit = time.time() + 2.0
    codes, _wall = earn.run_pool({"long": [sys.executable, "-c", body]}, 1, limit, tmp_path,
                                 dict(os.environ), say=said.append)
    # 4 from its handler; -15 when the signal came before Python installed it: either way the
    # pool's SIGTERM ended it, before any SIGKILL
    assert codes["long"] in (4, -15)
    assert said == ["training long: stopped at the deadline"]


def test_a_server_that_comes_up_during_generation_gets_work(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first server's third batch waits until the second server has answered one: it
    finishes only if the second, which appears after the first has answered two, gets work."""
    helped = threading.Event()
    seen = {"a": 0, "b": 0}
    lock = threading.Lock()

    def post(url: str, body: dict[str, Any], timeout_s: float = 0.0) -> Any:
        with lock:
            seen[url] += 1
            mine = seen[url]
        if url == "a" and mine == 3:
            assert helped.wait(120.0), "the second server never got a batch"
        if url == "b":
            helped.set()
        return [{"output_ids": [p[0]] * 10, "meta_info": {}} for p in body["input_ids"]]

    monkeypatch.setattr(earn.gen, "post", post)
    monkeypatch.setattr(earn.gen, "THREADS", 1)
    monkeypatch.setattr(earn.gen, "BATCH", 4)
    runner = object.__new__(earn.Earn)

    def urls() -> list[str]:
        with lock:
            return ["a", "b"] if seen["a"] >= 2 else ["a"]

    out = runner.spread(urls, [[i] for i in range(40)], 10, max_servers=2)
    assert [o["output_ids"][0] for o in out] == list(range(40))
    assert seen["b"] >= 1
    assert seen["a"] + seen["b"] == 10


class _Handle:
    def __init__(self, url: str) -> None:
        self.url = url
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_the_fleet_starts_servers_one_after_another_and_stops_them_all(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    release, entered = threading.Event(), threading.Event()
    order: list[str] = []
    handles: list[_Handle] = []

    def start(prof: Any, config: str, log_path: Path, port: int) -> tuple[_Handle, float]:
        order.append(log_path.name)
        assert port == 7000 + len(order)  # picked just before this start
        if log_path.name == "g1.log":
            raise RuntimeError("Loaded weights leave no GPU memory for the KV cache")
        if log_path.name == "g2.log":
            entered.set()
            assert release.wait(120.0)
        handles.append(_Handle(f"http://{log_path.stem}"))
        return handles[-1], 1.0

    picked = iter(range(7001, 7010))
    monkeypatch.setattr(earn.serve, "start", start)
    monkeypatch.setattr(earn, "free_ports", lambda n: [next(picked) for _ in range(n)])
    fleet = earn.Fleet([(None, tmp_path / f"g{i}.log") for i in range(3)])
    assert fleet.wait_first() == "http://g0"
    assert entered.wait(120.0)  # g1 failed before g2's start began
    assert fleet.urls() == ["http://g0"]  # g2 is starting: not served until it is ready
    release.set()
    started = fleet.stop()
    assert order == ["g0.log", "g1.log", "g2.log"]
    assert [(i, h.url) for i, h, _, _ in started] == [(0, "http://g0"), (2, "http://g2")]
    assert all(h.stopped for h in handles)
    assert fleet.failed == ["g1.log: Loaded weights leave no GPU memory for the KV cache"]


def test_no_generation_server_is_an_error_naming_why(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def start(prof: Any, config: str, log_path: Path, port: int) -> tuple[_Handle, float]:
        raise RuntimeError("exited with code -9")

    monkeypatch.setattr(earn.serve, "start", start)
    monkeypatch.setattr(earn, "free_ports", lambda n: list(range(n)))
    fleet = earn.Fleet([(None, tmp_path / "g0.log")])
    with pytest.raises(RuntimeError, match=r"no generation server started: g0.log: exited"):
        fleet.wait_first()
    assert fleet.stop() == []


def _runner(earn: ModuleType, tmp_path: Path, **args: Any) -> Any:
    """An Earn with only the record, WORK and the arguments these methods read."""
    import argparse

    runner = object.__new__(earn.Earn)
    runner.a = argparse.Namespace(**{"deadline": None, "train_deadline": None,
                                     "after_tune_s": 270.0, "tune_s": 240.0,
                                     "again": ["trained-again"], **args})
    runner.work = tmp_path
    runner.out = tmp_path / "out"
    runner.target = runner.serve_target = tmp_path / "target"
    runner.rec = {"seconds": {}, "errors": {}}
    runner.save = lambda: None
    return runner


def test_the_trainings_stop_in_time_for_the_tune_and_the_probes(
        earn: ModuleType, tmp_path: Path) -> None:
    assert _runner(earn, tmp_path).train_limit() is None
    assert _runner(earn, tmp_path, deadline=10_000.0).train_limit() == 10_000.0 - 270 - 240
    assert _runner(earn, tmp_path, deadline=10_000.0, train_deadline=9_000.0
                   ).train_limit() == 9_000.0


def test_a_second_run_starts_only_after_a_finished_first_run_and_when_time_holds_it(
        earn: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    done = {"epochs": 1, "epochs_done": 1, "sha256": "aa"}
    calls: list[tuple[list[str], float | None]] = []
    runner = _runner(earn, tmp_path, deadline=time.time() + 10_000)
    runner.maps = lambda: {}
    runner.train = lambda maps, names, limit: calls.append((names, limit))
    runner.rec["drafters"] = {"trained": {**done, "stopped": "SIGTERM after update 3 of 9"}}
    runner.train_again()
    assert calls == []
    assert runner.rec["again_skipped"] == ("trained-again: not started, trained did not finish "
                                           "its epochs")
    runner.rec["drafters"] = {"trained": done}
    runner.rec["train_wall_s"] = {"trained": 12_000.0}
    runner.train_again()
    assert calls == []
    assert "needs about 12180 s (the first run's 12000 s" in runner.rec["again_skipped"]
    runner.rec["train_wall_s"] = {"trained": 500.0}
    runner.train_again()
    assert calls == [(["trained-again"], runner.a.deadline - 130.0)]
    assert "again_skipped" not in runner.rec
    runner.rec["drafters"]["trained-again"] = done  # finished: not run a third time
    runner.train_again()
    assert len(calls) == 1


def test_a_stage_forgets_what_an_earlier_run_left_for_it(earn: ModuleType, tmp_path: Path) -> None:
    for rel in ("drafters/trained/summary.json", "out/probe-1/verdict.json",
                "out/drafters/trained/summary.json", "out/prompts-used.jsonl",
                "reports/probe/history.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    runner = _runner(earn, tmp_path)
    runner.rec.update({"drafters": {"trained": {}}, "probe-1": {}, "answers": {"prompts": 3}})
    runner.forget(("drafters", "probe-1"), ("drafters", "out/drafters", "out/probe-*",
                                            "reports"))
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "out", "out/prompts-used.jsonl"]
    assert runner.rec == {"seconds": {}, "errors": {}, "answers": {"prompts": 3}}


class _Proc:
    """A stand-in for subprocess.Popen that runs past its time: wait() times out until it is
    sent SIGTERM, after which it ends (or, with `stubborn`, only after SIGKILL)."""

    pid = 4242

    def __init__(self, stubborn: bool) -> None:
        self.stubborn = stubborn
        self.signals: list[str] = []
        self.code: int | None = None
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        self.waits.append(timeout)
        if self.code is None and not (self.signals and not self.stubborn):
            if timeout is None:
                raise AssertionError("an unbounded wait on a process that does not end")
            raise subprocess.TimeoutExpired("tune", timeout)
        if self.code is None:
            self.code = -15
        return self.code

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.signals.append("TERM")

    def kill(self) -> None:
        self.signals.append("KILL")
        self.code = -9


@pytest.mark.parametrize("stubborn", [False, True])
def test_a_tune_past_its_time_is_asked_to_stop_before_it_is_killed(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        stubborn: bool) -> None:
    procs: list[_Proc] = []

    def popen(argv: list[str], **kw: Any) -> _Proc:
        procs.append(_Proc(stubborn))
        return procs[-1]

    class _Child:
        def __init__(self) -> None:
            self.killed = False

        def kill(self) -> None:
            self.killed = True

    server = _Child()
    asked: list[int] = []

    def below(pid: int) -> list[_Child]:
        asked.append(pid)
        return [server]

    monkeypatch.setattr(earn.subprocess, "Popen", popen)
    assert earn.run_until(["specgate", "tune"], None, tmp_path, 5.0, 90.0, below) == 124
    # SIGTERM first (specgate tune stops its server and writes tune.json); SIGKILL only for a
    # process still there after the grace, and then for the server it started too
    assert procs[0].signals == (["TERM", "KILL"] if stubborn else ["TERM"])
    assert procs[0].waits[:2] == [5.0, 90.0]
    assert server.killed is stubborn
    assert asked == ([4242] if stubborn else [])


def test_a_process_that_ends_in_time_keeps_its_exit_status(
        earn: ModuleType, tmp_path: Path) -> None:
    import sys

    argv = [sys.executable, "-c", "import sys; sys.exit(3)"]
    assert earn.run_until(argv, None, tmp_path, None, 1.0) == 3


class _WarmHandle:
    url = "http://warm"

    def __init__(self) -> None:
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


class _Client:
    asked: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []

    def __init__(self, url: str, api_key: str | None, timeout_s: float) -> None:
        self.url = url

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def generate(self, text: str, params: dict[str, Any]) -> None:
        self.asked.append((self.url, text, params))


def _warm_runner(earn: ModuleType, tmp_path: Path) -> Any:
    runner = _runner(earn, tmp_path)
    runner.target = tmp_path / "target"
    runner.launcher = ["python3", "-m", "sglang.launch_server"]
    runner.sim = False
    runner.target.mkdir()
    return runner


def test_the_warm_up_server_starts_beside_the_trainings_answers_once_and_stops(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import specgate.serving.client as client_module

    handle = _WarmHandle()
    started: list[tuple[list[str], str, float]] = []

    def start(prof: Any, config: str, log_path: Path, port: int | None = None
              ) -> tuple[_WarmHandle, float]:
        started.append((list(prof.server.args), config, prof.server.startup_timeout_s))
        return handle, 12.34

    monkeypatch.setattr(earn.serve, "start", start)
    monkeypatch.setattr(earn.profiles, "chat_template", lambda target: None)
    monkeypatch.setattr(client_module, "SGLangClient", _Client)
    _Client.asked.clear()
    thread, rec = _warm_runner(earn, tmp_path).warm_up()
    thread.join()
    args, config, timeout = started[0]
    assert config == "baseline"
    assert timeout == earn.WARM_UP_TIMEOUT_S
    # the fraction that lets it start beside a training; the probe's KV pool
    assert args[args.index("--mem-fraction-static") + 1] == str(earn.WARM_UP_MEM_FRACTION)
    assert args[args.index("--max-total-tokens") + 1] == "65536"
    assert [(u, p["max_new_tokens"]) for u, _, p in _Client.asked] == [("http://warm", 16)]
    assert handle.stopped == 1
    assert rec == {"ready_s": 12.3, "answered": True, "seconds": rec["seconds"]}


def test_a_warm_up_server_that_fails_is_recorded_and_nothing_raises(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def start(prof: Any, config: str, log_path: Path, port: int | None = None
              ) -> tuple[_WarmHandle, float]:
        raise RuntimeError("exited with code 1: out of memory")

    monkeypatch.setattr(earn.serve, "start", start)
    monkeypatch.setattr(earn.profiles, "chat_template", lambda target: None)
    thread, rec = _warm_runner(earn, tmp_path).warm_up()
    thread.join()
    assert rec == {"error": "exited with code 1: out of memory", "seconds": rec["seconds"]}


def test_a_warm_up_server_that_does_not_answer_is_still_stopped(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import specgate.serving.client as client_module

    handle = _WarmHandle()

    class _Silent(_Client):
        def generate(self, text: str, params: dict[str, Any]) -> None:
            raise ConnectionError("connection refused")

    monkeypatch.setattr(earn.serve, "start", lambda prof, config, log_path: (handle, 5.0))
    monkeypatch.setattr(earn.profiles, "chat_template", lambda target: None)
    monkeypatch.setattr(client_module, "SGLangClient", _Silent)
    thread, rec = _warm_runner(earn, tmp_path).warm_up()
    thread.join()
    assert handle.stopped == 1
    assert rec["error"] == "connection refused"
    assert "answered" not in rec


def test_the_train_stage_waits_for_the_warm_up_and_records_it(
        earn: ModuleType, tmp_path: Path) -> None:
    # the warm-up starts before the trainings, is joined after them, and its record is read
    # only then (the warm-up's thread fills it)
    order: list[str] = []
    runner = _runner(earn, tmp_path, stages=["train"], warm_up=True, trainings=["trained"])
    runner.maps = lambda: {}
    runner.train_limit = lambda: None

    class _Thread:
        def __init__(self, rec: dict[str, Any]) -> None:
            self.rec = rec

        def join(self) -> None:
            order.append("joined")
            self.rec["ready_s"] = 1.0

    def warm() -> tuple[_Thread, dict[str, Any]]:
        order.append("warm-up started")
        rec: dict[str, Any] = {}
        return _Thread(rec), rec

    runner.warm_up = warm
    runner.train = lambda maps, names, limit: order.append("trainings")
    (tmp_path / "drafters").mkdir()
    assert runner.run() == 0
    assert order == ["warm-up started", "trainings", "joined"]
    assert runner.rec["warm_up"] == {"ready_s": 1.0}
    runner.a.warm_up = False  # --no-warm-up: none started, the earlier record forgotten
    runner.warm_up = lambda: pytest.fail("a warm-up with --no-warm-up")
    assert runner.run() == 0
    assert "warm_up" not in runner.rec


def test_the_host_state_names_the_gpu_processes_and_the_load(earn: ModuleType) -> None:
    import subprocess

    state = earn.host_state(lambda argv: "4194, 1530\n4242, 22000\n", window_s=0.0)
    assert state["gpu_apps"] == [{"pid": 4194, "mib": 1530}, {"pid": 4242, "mib": 22000}]
    assert len(state["loadavg"]) == 3
    assert all(row["cpu_percent"] > 0 for row in state["busiest"])

    def no_gpu(argv: list[str]) -> str:
        raise subprocess.CalledProcessError(9, argv)

    assert earn.host_state(no_gpu, window_s=0.0)["gpu_apps"] is None


class _Served:
    """A stand-in server handle: its URL names the job it serves."""

    def __init__(self, name: str) -> None:
        self.url = f"http://{name}"
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("pairs", [False, True], ids=["at-once", "pairs"])
@pytest.mark.parametrize(("judge", "trained", "probed", "sizes"), [
    ("trained", ["trained", "third"], "spec-trained", {"trained": "spec-trained-1",
                                                       "third": "spec-third"}),
    ("ninth", ["ninth", "third"], "spec-ninth", {"ninth": "spec-ninth-1",
                                                 "third": "spec-third"}),
    ("ninth", ["trained", "ninth"], "spec-ninth", {"trained": "spec-trained",
                                                   "ninth": "spec-ninth-1"}),
])
def test_the_probes_serve_the_judged_drafter_and_every_other_size_once(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, judge: str,
        trained: list[str], probed: str, sizes: dict[str, str], pairs: bool) -> None:
    for name in trained:
        (tmp_path / "drafters" / name).mkdir(parents=True)
        (tmp_path / "drafters" / name / "model.safetensors").write_bytes(b"")
    runner = _runner(earn, tmp_path, judge=judge, probe_timeout=600.0,
                     pairs="on" if pairs else "off", serve_mem_fraction=0.35 if pairs else 0.6)
    runner.target, runner.heldout_dir, runner.launcher, runner.sim = tmp_path, tmp_path, [], True
    runner.serve_target = tmp_path / "served"
    runner.lap_t = 0.0
    started: dict[str, _Served] = {}
    probes: list[tuple[str, list[str]]] = []
    measured: dict[str, tuple[str, str]] = {}
    up_at_once: list[set[str]] = []  # the servers up whenever one starts, probes or measures

    def up() -> set[str]:
        return {n for n, h in started.items() if not h.stopped}

    def probe(target: Path, drafter: Path, heldout: Path, launcher: list[str], sim: bool,
              steps: int, label: str, overrides: dict[str, str]) -> dict[str, Any]:
        assert target == tmp_path / "served"
        assert steps == 1
        assert overrides == {"--mem-fraction-static": "0.35" if pairs else "0.6"}
        return {"drafter": drafter.name, "label": label}

    def start(prof: dict[str, Any], config: str, log_path: Path, port: int
              ) -> tuple[_Served, float]:
        name = log_path.stem
        assert prof["drafter"] == (judge if config == "baseline" else name.split("-")[1])
        started[name] = _Served(name)
        up_at_once.append(up())
        return started[name], 1.0

    def accept_length(url: str, prof: dict[str, Any]) -> dict[str, Any]:
        assert url.removeprefix("http://") in up()
        measured[prof["drafter"]] = (url.removeprefix("http://"), prof["label"])
        up_at_once.append(up())
        return {"accept_len": 1.5}

    def pytest_probe(work: Path, prof: Path, name: str, extra: list[str], timeout: float,
                     reports: Path) -> dict[str, Any]:
        assert {x.rsplit("=", 1)[1].removeprefix("http://") for x in extra} <= up()
        probes.append((name, extra))
        up_at_once.append(up())
        return {"exit": 1}

    monkeypatch.setattr(earn.profiles, "probe", probe)
    monkeypatch.setattr(earn.profiles, "write", lambda doc, path: path)
    monkeypatch.setattr(earn.profiles, "load", lambda doc, path: doc)
    monkeypatch.setattr(earn, "free_ports", lambda n: list(range(n)))
    monkeypatch.setattr(earn.serve, "start", start)
    monkeypatch.setattr(earn.serve, "pytest_probe", pytest_probe)
    monkeypatch.setattr(earn.serve, "accept_length", accept_length)
    monkeypatch.setattr(earn, "host_state", lambda: {})
    runner.serve(1)
    others = {f"spec-{n}" for n in trained if n != judge}
    assert set(started) == {"baseline-1", "baseline-2", f"{probed}-1", f"{probed}-2", *others}
    assert [(n, [x.rsplit("=", 1)[1] for x in extra]) for n, extra in probes] == [
        ("probe-1", [f"http://{probed}-1", "http://baseline-1"]),
        ("probe-2", [f"http://{probed}-2", "http://baseline-2"])]
    assert measured == {n: (server, n) for n, server in sizes.items()}
    assert runner.rec["judged"] == judge
    assert runner.rec["served_steps"] == 1
    assert runner.rec["serve_pairs"] is pairs
    assert set(runner.rec["served_sizes"]) == set(sizes)
    assert all(h.stopped for h in started.values())
    if pairs:  # never more than one probe's pair up, and no size served beside a pair
        assert max(len(u) for u in up_at_once) == 2
        assert all(len(u) <= 1 for u in up_at_once if u & others)
    else:  # every server was up while the probes ran
        assert max(len(u) for u in up_at_once) == len(started)


def test_the_probes_serve_the_tunes_chain_only_when_it_tuned_the_judged_drafter(
        earn: ModuleType, tmp_path: Path) -> None:
    runner = _runner(earn, tmp_path, judge="third", fallback_steps=1)
    assert runner.chain() == 1  # no tune
    runner.rec["tune"] = {"best_steps": 3}  # a record without a judge: trained's tune
    assert runner.chain() == 1
    runner.rec["tune"] = {"best_steps": 3, "judge": "trained"}
    assert runner.chain() == 1
    runner.rec["tune"] = {"best_steps": 3, "judge": "third"}
    assert runner.chain() == 3
    runner.rec["tune"] = {"best_steps": None, "judge": "third"}  # the tune measured nothing
    assert runner.chain() == 1
    runner.a.judge = "trained"
    runner.rec["tune"] = {"best_steps": 4}
    assert runner.chain() == 4
    # a tune that served another target (a widened one, say) picks nothing for this one
    runner.rec["tune"] = {"best_steps": 4, "judge": "trained",
                          "served_target": str(tmp_path / "target-13.97gb")}
    assert runner.chain() == 1
    runner.serve_target = tmp_path / "target-13.97gb"
    assert runner.chain() == 4
    runner.target = tmp_path / "target"
    runner.rec["tune"] = {"best_steps": 2, "judge": "trained"}  # a record of the target itself
    assert runner.chain() == 1


GB = 10**9
GIB = 2**30


@pytest.mark.parametrize(("mode", "servers", "weights", "gpu_gib", "pairs"), [
    ("auto", 4, 14 * GB, 79.6, True),  # one H100: four 14 GB servers do not fit its 60 %
    ("auto", 4, 14 * GB, 139.8, False),  # one H200: they do
    ("auto", 6, 14 * GB, 139.8, True),  # six do not
    ("auto", 6, GB // 4, 79.6, False),  # the 135M target, six at once on an H100
    ("auto", 6, 14 * GB, None, False),  # no nvidia-smi: as before, all at once
    ("on", 2, 1, 139.8, True),
    ("off", 6, 14 * GB, 79.6, False),
])
def test_the_serve_stage_pairs_its_servers_when_the_gpu_cannot_hold_them_all(
        earn: ModuleType, mode: str, servers: int, weights: int, gpu_gib: float | None,
        pairs: bool) -> None:
    assert earn.serve_in_pairs(mode, servers, weights, gpu_gib, 0.6) is pairs


def test_no_server_starts_that_no_probe_or_measurement_could_follow(
        earn: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import time

    (tmp_path / "drafters" / "trained").mkdir(parents=True)
    (tmp_path / "drafters" / "trained" / "model.safetensors").write_bytes(b"")
    (tmp_path / "drafters" / "third").mkdir(parents=True)
    (tmp_path / "drafters" / "third" / "model.safetensors").write_bytes(b"")
    # time for a size's server and its measurement, not for a pair and its probe
    runner = _runner(earn, tmp_path, judge="trained", probe_timeout=600.0, pairs="on",
                     serve_mem_fraction=0.6,
                     deadline=time.time() + earn.GROUP_START_S + 0.5 * earn.PROBE_MIN_S + 30)
    runner.target, runner.heldout_dir, runner.launcher, runner.sim = tmp_path, tmp_path, [], True
    runner.lap_t = 0.0
    started: list[str] = []
    monkeypatch.setattr(earn.profiles, "probe", lambda *a, **k: {"drafter": a[1].name})
    monkeypatch.setattr(earn.profiles, "write", lambda doc, path: path)
    monkeypatch.setattr(earn.profiles, "load", lambda doc, path: doc)
    monkeypatch.setattr(earn, "free_ports", lambda n: list(range(n)))
    monkeypatch.setattr(earn.serve, "start", lambda p, c, log_path, port: (
        started.append(log_path.stem) or _Served(log_path.stem), 1.0))
    monkeypatch.setattr(earn.serve, "accept_length", lambda url, prof: {"accept_len": 1.4})
    runner.serve(4)
    assert started == ["spec-third"]
    skipped = runner.rec["serve_skipped"]
    assert set(skipped) == {"baseline-1,spec-trained-1", "baseline-2,spec-trained-2"}
    assert all(v.startswith("not started: ") for v in skipped.values())
    assert "probe-1" not in runner.rec


def test_the_chain_table_names_the_tunes_drafter_and_the_probe_table_the_judged_one(
        tmp_path: Path) -> None:
    rep = load_real_model_script("earn_report")
    out = _served_run(tmp_path / "out", 4, {"trained": 1.66, "ninth": 1.25}, judged="ninth")
    earn = json.loads((out / "earn.json").read_text())
    earn["tune"] = {"best_steps": 4}  # a tune of trained (no judge recorded), then ninth probed
    (out / "earn.json").write_text(json.dumps(earn))
    (out / "tune").mkdir()
    (out / "tune" / "tune.json").write_text(json.dumps({
        "best": "s4-k1-d5", "predictions": {"s4-k1-d5": {"tau": 1.7, "cycle_ms": 3.0}},
        "trials": []}))
    text, _ = rep.report(out)
    chains, probes = text.split("## Chains (tune)")[1].split("## Probes")
    assert "Drafter: trained." in chains
    assert "| s4-k1-d5 | no (predicted) | 3.00 | — | 1.700 | 1.650 | — |" in chains  # trained's
    assert "Drafter: ninth." in probes


def test_a_run_without_its_served_chain_joins_no_curve_and_a_missing_one_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = load_real_model_script("earn_report")
    here = _served_run(tmp_path / "here", 3, {"ninth": 1.25})
    old = _served_run(tmp_path / "old", 3, {"third": 1.42})
    earn = json.loads((old / "earn.json").read_text())
    del earn["served_steps"]  # which chain served it is not known
    (old / "earn.json").write_text(json.dumps(earn))
    _, curve = rep.report(here, (old,))
    assert [c[3] for c in curve] == ["ninth"]
    assert rep.main([str(here), "--with", str(tmp_path / "nowhere")]) == 2
    assert f"--with {tmp_path / 'nowhere'}: no earn.json" in capsys.readouterr().err


def test_the_judged_drafter_must_be_among_the_trainings_of_a_train_stage(
        earn: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        earn.main(["--target", str(tmp_path), "--work", str(tmp_path / "w"), "--specforge",
                   str(tmp_path), "--stages", "train", "--trainings", "ninth",
                   "--judge", "third"])
    assert exc.value.code == 2
    assert not (tmp_path / "w").exists()


def test_the_report_names_the_widened_target_the_probes_served(tmp_path: Path) -> None:
    rep = load_real_model_script("earn_report")
    out = _served_run(tmp_path / "out", 4, {"trained": 1.66})
    text, _ = rep.report(out)
    assert "## Served target" not in text  # the target itself
    earn = json.loads((out / "earn.json").read_text())
    earn["served_target"] = {"path": "/w/target-13.97gb", "intermediate_size": 133760,
                             "padding": {"source_intermediate_size": 1536,
                                         "step_bytes": 13_970_054_400,
                                         "source_step_bytes": 269_060_736,
                                         "max_relative_mlp_difference": 0.0021}}
    (out / "earn.json").write_text(json.dumps(earn))
    text, _ = rep.report(out)
    assert ("intermediate size 1536 -> 133760, 13.97 GB read a decode step against 0.269 GB; "
            "each widened MLP against the original on random input: largest relative "
            "difference 2.1e-03.") in text


def test_a_size_the_run_did_not_train_is_named_as_not_asked_for(tmp_path: Path) -> None:
    rep = load_real_model_script("earn_report")
    out = _served_run(tmp_path / "out", 4, {"trained": 1.66})
    text, _ = rep.report(out)
    assert "Not served: ninth, third (no trained drafter;" in text  # the record does not say
    earn = json.loads((out / "earn.json").read_text())
    earn["args"] = {"data,train": {"trainings": "['trained', 'third', 'ninth']"},
                    "heldout,train": {"trainings": "['trained', 'ninth']"},
                    "tune,serve": {"trainings": "['trained']"}}
    (out / "earn.json").write_text(json.dumps(earn))
    text, _ = rep.report(out)
    assert "Not served: third (not among this run's --trainings)." in text
    assert "Not served: ninth (no trained drafter;" in text

