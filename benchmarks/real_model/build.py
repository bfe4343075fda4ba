"""Self-distil EAGLE-3 drafters for a real target served by SGLang, and judge the offline claims.

One command, seeded, on one GPU where SGLang 0.5.17 and specgate are installed (run.sh runs it
with serve.py after it):

    python3 -m benchmarks.real_model.build --target TARGET --work WORK --seed 0

1. Prompts (prompts.py): family "tasks" (templates, word lists, standard-library text), and the
   requests that make the model write family "self" (its own questions); none is the probe's.
2. SGLang serves the target (the probe's baseline flags, larger KV pool); its greedy answers
   (temperature 0, many prompts in flight, rendered with the target's own chat template) are
   the training data. The probe's 42 prompts, rendered as the probe renders them, are answered
   too (the held-out dump that eval.live_agreement replays). The server's first start is
   recorded as a launch of variance.py.
3. transformers' forward of prompt + answer gives the aux hidden states SGLang captures
   (capture.py: inputs of layers 2, 15, 27); dumps in specgate's format under WORK/dumps.
4. Draft vocabularies from the answers' token frequencies, as SpecForge builds them (vocab.py).
5. Drafters (train.py, specgate.model.eagle's forward), trained at once on one GPU:
   trained (tasks, its own map), borrowed (self, its own map), data-size runs (a ninth and a
   third of tasks); then the borrowed drafter remapped to the trained map (specgate
   remap-vocab), the borrowed weights with the trained map copied in unchanged ("mismatched"),
   and two fine-tunes on tasks from the borrowed drafter, remapped and not.
6. The offline claims: vocab.* of borrowed and remapped against trained (`-m "probe and not
   live"`), finetune.* / eval.teacher_forced of both fine-tunes (`-m phase1`), data.* of the
   three data sizes (`-m phase2`).
WORK/build.json records every figure and time; WORK/out holds the files a result keeps.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import with_root
from benchmarks.real_model import (
    capture,
    gen,
    profiles,
    prompts,
    variance,
    vocab,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

DRAFT_VOCAB = 16384
VAL_FRACTION = 0.05  # of the tasks samples, never trained on: Phase 1's eval dump
SIZES = {"ninth": 9, "third": 3}  # data-size runs: 1/k of the trained drafter's samples


def log(msg: str) -> None:
    print(f"[build {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Build:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work: Path = args.work
        self.target: Path = args.target
        self.launcher = shlex.split(args.launcher)
        self.sim: bool = args.sim
        self.record: dict[str, Any] = {"seed": args.seed, "seconds": {}, "python": sys.version}
        self.t0 = time.monotonic()
        self.lap_t = self.t0
        self.drafters = self.work / "drafters"
        self.dumps = self.work / "dumps"

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.record["seconds"][name] = round(now - self.lap_t, 1)
        self.lap_t = now
        self.save()

    def save(self) -> None:
        (self.work / "build.json").write_text(json.dumps(self.record, indent=1, default=str)
                                              + "\n")

    # --- 1-2: prompts and answers ------------------------------------------------------------

    def answers(self) -> None:
        from transformers import AutoTokenizer

        from specgate.results import prompts as probe_prompts
        from specgate.serving import launch, server

        a = self.args
        tok: Any = AutoTokenizer.from_pretrained(str(self.target))
        keep = prompts.ProbeFilter(prompts.probe_texts())
        if a.tasks_file:
            tasks = [json.loads(line) for line in a.tasks_file.read_text().splitlines() if line]
            tasks = [t for t in tasks if not keep.excluded(t["prompt"])][:a.n_tasks]
        else:
            tasks, _ = prompts.task_prompts(a.n_tasks, a.seed, keep)
        asks = prompts.question_requests(a.n_questions, a.seed + 1)

        def chat(text: str) -> list[int]:
            got: Any = tok.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=True)
            return [int(i) for i in (got["input_ids"] if hasattr(got, "keys") else got)]

        prof = profiles.load(profiles.generation(self.target, self.launcher, self.sim),
                             self.work / "profiles" / "generation.toml")
        template = probe_prompts.choose_template(prof.bench.chat_template, self.target)
        self.record["heldout_template"] = {"name": template.name, "source": template.source}
        spec = launch.build_command(prof, "baseline")
        log(f"generation server: {spec.display()}")
        started = time.monotonic()
        first = variance.first_start()
        handle = server.launch(spec, self.work / "logs" / "generation-server.log",
                               startup_timeout_s=prof.server.startup_timeout_s)
        ready = time.monotonic() - started
        log(f"generation server ready after {ready:.1f} s")
        self.lap("generation server start")
        try:
            measured = variance.measure(handle.url, prof)
            self.record["variance_first"] = variance.record(
                1, "generation server (first start; KV pool 600000, 512 requests)", ready,
                first, list(prof.server.args), measured, 0)
            log(f"generation server: {measured['tps']} tok/s single stream")
            self.lap("first-start measurement")
            # the probe's prompts, sent as the probe sends them (text), for the held-out dump
            probe = probe_prompts.load_builtin()
            texts = [template.render(p.text) for p in probe]
            held = gen.generate(handle.url, texts, a.heldout_tokens, batch=8)
            self.heldout = [(p.id, p.category, list(tok.encode(t)), h["output_ids"], h)
                            for p, t, h in zip(probe, texts, held, strict=True)]
            mismatch = sum(1 for *_x, ids, _ans, h in self.heldout
                           if h.get("prompt_tokens") not in (None, len(ids)))
            self.record["heldout_prompt_token_mismatches"] = mismatch
            # family "self": the model writes its questions
            written = gen.generate(handle.url, [chat(r["prompt"]) for r in asks], 64,
                                   progress=log)
            selfp, dropped = prompts.self_prompts(
                [tok.decode(w["output_ids"], skip_special_tokens=True) for w in written], keep)
            self.record["self_prompts"] = {"requests": len(asks), "kept": len(selfp),
                                           "dropped": dropped}
            self.lap("held-out and questions")
            log(f"prompts: {len(tasks)} tasks, {len(selfp)} self-written ({dropped})")
            # the smaller family first: a time cap cuts only the end of the tasks family
            rows = [("self", s) for s in selfp] + [("tasks", t) for t in tasks]
            ids = [chat(r["prompt"]) for _, r in rows]
            out = gen.generate(handle.url, ids, a.train_tokens, progress=log,
                               stop_at=time.monotonic() + a.gen_seconds)
            if len(out) < len(rows):
                log(f"generation: {a.gen_seconds:.0f} s cap reached after {len(out)} of "
                    f"{len(rows)} prompts")
            rows, ids = rows[:len(out)], ids[:len(out)]
        finally:
            handle.stop()
        self.train_rows = [(fam, r, p, o["output_ids"]) for (fam, r), p, o
                           in zip(rows, ids, out, strict=True) if o["output_ids"]]
        n_tok = sum(len(o) for *_x, o in self.train_rows)
        self.record["answers"] = {"tasks": sum(1 for f, *_x in self.train_rows if f == "tasks"),
                                  "self": sum(1 for f, *_x in self.train_rows if f == "self"),
                                  "answer_tokens": n_tok, "prompts_sent": len(rows),
                                  "finished_by_eos": sum(1 for o in out if (o.get("finish") or {})
                                                         .get("type") == "stop")}
        out_dir = self.work / "out"
        out_dir.mkdir(parents=True, exist_ok=True)
        prompts.write_jsonl([r for _, r in rows], out_dir / "prompts-used.jsonl")
        self.lap("training answers")

    # --- 3-4: capture, dumps, vocab maps -------------------------------------------------------

    def dumps_and_maps(self) -> None:
        import torch
        from safetensors.numpy import save_file as save_np
        from transformers import AutoModelForCausalLM

        device = "cuda" if torch.cuda.is_available() else "cpu"
        model: Any = AutoModelForCausalLM.from_pretrained(str(self.target), dtype=torch.bfloat16)
        model = model.to(device).eval()
        n_layers = model.config.num_hidden_layers
        layers = capture.sglang_capture_layers(None, n_layers)
        ids_cfg = capture.config_ids_for(layers)
        embed = model.model.embed_tokens.weight.detach()
        meta = {"format": "specgate.hidden_states", "version": 1,
                "aux_hidden_state_layer_ids": ids_cfg, "captured_layer_inputs": layers,
                "target_model_type": "llama", "target_hidden_size": model.config.hidden_size,
                "num_aux_hidden_states": 3, "dtype": "bfloat16",
                "generated_by": "benchmarks/real_model/build.py (SGLang answers, transformers "
                                "forward)"}
        self.record["capture_layers"] = {"sglang_default": layers, "config_ids": ids_cfg}
        # held-out: the probe's prompts
        seqs = [p + a for _i, _c, p, a, _h in self.heldout]
        caps, stats = capture.capture(model, seqs, [len(p) for _i, _c, p, _a, _h in self.heldout],
                                      device, ids_cfg)
        held = self.dumps / "heldout"
        capture.write_samples(held, [i for i, *_x in self.heldout], caps, full=True)
        capture.finish_dump(held, embed, dict(
            meta, **stats, chat_template=self.record["heldout_template"]["name"],
            max_new_tokens=self.args.heldout_tokens,
            samples={i: {"category": c, "prompt_tokens": len(p), "tokens": len(p) + len(a)}
                     for i, c, p, a, _h in self.heldout}))
        self.record["capture_heldout"] = stats
        # training families
        rng = random.Random(self.args.seed)
        fams: dict[str, list[tuple[str, list[int], list[int]]]] = {"tasks": [], "self": []}
        for fam, row, p, a in self.train_rows:
            fams[fam].append((row["id"], p, a))
        for fam, rows in fams.items():
            caps, stats = capture.capture(model, [p + a for _n, p, a in rows],
                                          [len(p) for _n, p, a in rows], device, ids_cfg)
            names = [n for n, _p, _a in rows]
            folder = self.dumps / fam
            capture.write_samples(folder, names, caps, full=False)
            capture.finish_dump(folder, embed, dict(meta, **stats, family=fam))
            self.record[f"capture_{fam}"] = stats
            log(f"dump {fam}: {len(rows)} samples, argmax agreement "
                f"{stats['argmax_agreement']:.4f}, hooks vs hidden_states "
                f"{stats['hook_vs_hidden_states_max_abs']:.3g}")
            samples = [(c["input_ids"].numpy(), c["loss_mask"].numpy()) for c in caps]
            if fam == "tasks":
                order = list(range(len(rows)))
                rng.shuffle(order)
                n_val = max(1, int(VAL_FRACTION * len(rows)))
                val, train = sorted(order[:n_val]), sorted(order[n_val:])
                capture.link_subset(folder, self.dumps / "tasks-val", [names[i] for i in val],
                                    dict(meta, family="tasks", part="validation"))
                capture.link_subset(folder, self.dumps / "tasks-train",
                                    [names[i] for i in train], dict(meta, family="tasks"))
                for label, k in SIZES.items():
                    part = train[:max(1, len(train) // k)]
                    capture.link_subset(folder, self.dumps / f"tasks-{label}",
                                        [names[i] for i in part],
                                        dict(meta, family="tasks", part=f"1/{k}"))
                    self.maps(f"tasks-{label}", [samples[i] for i in part], save_np)
                samples = [samples[i] for i in train]
                fam = "tasks-train"
            self.maps(fam, samples, save_np)
        del model
        torch.cuda.empty_cache()
        self.lap("capture and maps")

    def maps(self, name: str, samples: list[tuple[Any, Any]], save_np: Any) -> None:
        counts = vocab.count_tokens(samples)
        d2t, t2d = vocab.mappings(counts, self.args.draft_vocab, self.vocab_size())
        folder = self.work / "maps"
        folder.mkdir(parents=True, exist_ok=True)
        save_np({"d2t": d2t, "t2d": t2d}, str(folder / f"{name}.safetensors"))
        vocab.save_tokens(folder / f"{name}-tokens.npz", samples)
        self.record.setdefault("maps", {})[name] = {
            "samples": len(samples), "masked_tokens": int(sum(counts.values())),
            "distinct_tokens": len(counts), "coverage": round(vocab.coverage(counts, d2t), 5)}

    def vocab_size(self) -> int:
        return int(json.loads((self.target / "config.json").read_text())["vocab_size"])

    # --- 5: training ---------------------------------------------------------------------------

    def train(self, runs: dict[str, dict[str, Any]]) -> None:
        """Start every run as its own process on the GPU, wait for all."""
        py = sys.executable
        procs = {}
        for name, r in runs.items():
            out = self.drafters / name
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            argv = [py, "-m", "benchmarks.real_model.train", "--dump", str(r["dump"]),
                    "--vocab-map", str(r["map"]), "--target", str(self.target), "--out", str(out),
                    "--seconds", str(r["seconds"]), "--seed", str(r.get("seed",
                                                                        self.args.seed)),
                    "--heldout", str(self.dumps / "heldout"),
                    "--request-tokens", str(self.args.heldout_tokens)]
            if r.get("init"):
                argv += ["--init", str(r["init"])]
            if self.args.device:
                argv += ["--device", self.args.device]
            fh = (self.work / "logs" / f"train-{name}.log").open("w")
            procs[name] = (subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT,
                                            cwd=ROOT, env=with_root()), fh)
            log(f"train {name}: started ({' '.join(argv[2:])})")
        for name, (proc, fh) in procs.items():
            code = proc.wait()
            fh.close()
            summary = self.drafters / name / "summary.json"
            self.record.setdefault("drafters", {})[name] = (
                json.loads(summary.read_text()) if summary.exists() else {"exit": code})
            log(f"train {name}: exit {code}")
            if code != 0:
                tail = (self.work / "logs" / f"train-{name}.log").read_text()[-3000:]
                log(f"train {name} failed:\n{tail}")

    def remaps(self) -> None:
        """borrowed → the trained map (remap-vocab), and the borrowed weights with the trained
        map copied in unchanged (what vocab.d2t_match exists to catch)."""
        from safetensors.torch import load_file, save_file

        from specgate.io.remap import remap_vocab

        trained_map = self.work / "maps" / "tasks-train.safetensors"
        out = self.drafters / "borrowed-remapped"
        shutil.rmtree(out, ignore_errors=True)
        result = remap_vocab(self.drafters / "borrowed", trained_map, out)
        self.record["remap"] = {"summary": result.summary(), "carried": result.carried_rows,
                                "filled": result.filled_rows}
        log(result.summary())
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            src = self.drafters / "borrowed" / name
            if src.exists():
                shutil.copy(src, out / name)
        bad = self.drafters / "borrowed-mismatched"
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(self.drafters / "borrowed", bad)
        tensors = load_file(str(bad / "model.safetensors"))
        tmap = load_file(str(trained_map))
        tensors["d2t"], tensors["t2d"] = tmap["d2t"], tmap["t2d"]
        save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
        for extra in ("prediction.json", "summary.json", "logs"):
            path = bad / extra
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    # --- 6: offline claims ---------------------------------------------------------------------

    def claims(self) -> None:
        d, m, dumps = self.drafters, self.work / "maps", self.dumps
        p = self.work / "profiles"
        runs: dict[str, tuple[str, dict[str, Any]]] = {
            "borrowed-before-remap": ("probe and not live", profiles.vocab_check(
                self.target, d / "borrowed", d / "trained", self.launcher, self.sim,
                "borrowed-before-remap")),
            "borrowed-after-remap": ("probe and not live", profiles.vocab_check(
                self.target, d / "borrowed-remapped", d / "trained", self.launcher, self.sim,
                "borrowed-after-remap")),
        }
        for ft in ("remapped", "raw"):
            init = d / ("borrowed-remapped" if ft == "remapped" else "borrowed")
            runs[f"finetune-from-borrowed-{ft}"] = ("phase1", profiles.phase1(
                self.target, d / f"finetune-{ft}", init, d / f"finetune-{ft}" / "logs" /
                "train.jsonl", d / "trained" / "logs" / "train.jsonl",
                m / "tasks-train.safetensors", dumps / "tasks-val", self.launcher, self.sim,
                f"finetune-from-borrowed-{ft}"))
        for label, drafter, dump in (("data-ninth", "size-ninth", "tasks-ninth"),
                                     ("data-third", "size-third", "tasks-third"),
                                     ("data-full", "trained", "tasks-train")):
            runs[label] = ("phase2", profiles.phase2(self.target, d / drafter, dumps / dump,
                                                     self.launcher, self.sim, label))

        def one(name: str) -> tuple[str, int, float]:
            marker, doc = runs[name]
            prof = profiles.write(doc, p / f"{name}.toml")
            reports = self.work / "reports" / name
            shutil.rmtree(reports, ignore_errors=True)
            t = time.monotonic()
            with (self.work / "logs" / f"pytest-{name}.log").open("w") as fh:
                code = subprocess.run([sys.executable, "-m", "pytest", "-m", marker,
                                       f"{OPTIONS['profile']}={prof}",
                                       f"{OPTIONS['reports']}={reports}", "-p",
                                       "no:cacheprovider", "-q"], stdout=fh,
                                      stderr=subprocess.STDOUT, cwd=self.work,
                                      check=False).returncode
            return name, code, time.monotonic() - t

        with cf.ThreadPoolExecutor(max_workers=len(runs)) as pool:
            for name, code, took in pool.map(one, list(runs)):
                verdict = self.work / "reports" / name / "verdict.json"
                doc = json.loads(verdict.read_text()) if verdict.exists() else {}
                self.record.setdefault("claims", {})[name] = {
                    "exit": code, "seconds": round(took, 1), "outcome": doc.get("outcome"),
                    "claims": [{k: c.get(k) for k in ("id", "status", "observed", "expected",
                                                       "message")}
                               for c in doc.get("claims", [])]}
                log(f"claims {name}: exit {code}, {doc.get('outcome')} ({took:.0f} s)")
        self.lap("offline claims")

    # --- all -----------------------------------------------------------------------------------

    def run(self) -> int:
        a = self.args
        for sub in ("logs", "profiles", "out"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        self.answers()
        self.dumps_and_maps()
        maps, dumps = self.work / "maps", self.dumps
        first = {"trained": {"dump": dumps / "tasks-train", "map": maps / "tasks-train.safetensors",
                             "seconds": a.train_seconds},
                 "borrowed": {"dump": dumps / "self", "map": maps / "self.safetensors",
                              "seconds": a.borrowed_seconds, "seed": a.seed + 7}}
        for label in SIZES:
            first[f"size-{label}"] = {"dump": dumps / f"tasks-{label}",
                                      "map": maps / f"tasks-{label}.safetensors",
                                      "seconds": a.train_seconds}
        self.train(first)
        self.lap("training (trained, borrowed, sizes)")
        self.remaps()
        tm = maps / "tasks-train.safetensors"
        self.train({"finetune-remapped": {"dump": dumps / "tasks-train", "map": tm,
                                          "seconds": a.finetune_seconds,
                                          "init": self.drafters / "borrowed-remapped"},
                    "finetune-raw": {"dump": dumps / "tasks-train", "map": tm,
                                     "seconds": a.finetune_seconds,
                                     "init": self.drafters / "borrowed"}})
        self.lap("fine-tunes")
        self.claims()
        self.record["total_s"] = round(time.monotonic() - self.t0, 1)
        self.save()
        ok = all((self.drafters / n / "model.safetensors").exists()
                 for n in ("trained", "borrowed", "borrowed-remapped"))
        log(f"build {'done' if ok else 'INCOMPLETE'} in {self.record['total_s']} s; "
            f"{self.work / 'build.json'}")
        return 0 if ok else 1


OPTIONS = profiles.OPTIONS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=Path, required=True, help="the target's HF folder")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--launcher", default="python3 -m sglang.launch_server")
    ap.add_argument("--sim", action="store_true", help="specgate's simulator serves (dry run)")
    ap.add_argument("--tasks-file", type=Path, help="family tasks from this JSONL (prompts.py "
                    "writes it; default: made here from --seed)")
    ap.add_argument("--n-tasks", type=int, default=6000)
    ap.add_argument("--n-questions", type=int, default=2000)
    ap.add_argument("--train-tokens", type=int, default=320)
    ap.add_argument("--gen-seconds", type=float, default=150.0,
                    help="no batch of training prompts is sent after this long")
    ap.add_argument("--heldout-tokens", type=int, default=profiles.MAX_NEW_TOKENS)
    ap.add_argument("--draft-vocab", type=int, default=DRAFT_VOCAB)
    ap.add_argument("--train-seconds", type=float, default=150.0)
    ap.add_argument("--borrowed-seconds", type=float, default=90.0)
    ap.add_argument("--finetune-seconds", type=float, default=60.0)
    ap.add_argument("--device", help="training device (default cuda when there is one)")
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args.work.mkdir(parents=True, exist_ok=True)
    return Build(args).run()


if __name__ == "__main__":
    sys.exit(main())
