"""The tables of an earn.py run: data, trainings, the chain physics, the probes, the data-size
curve (and its plot).

usage: python3 earn_report.py OUT [--md OUT/summary.md] [--plot OUT/data-size.png]
OUT: the run's out/ folder (earn.json, drafters/*/summary.json and prediction.json,
tune/tune.json, probe-*/verdict.json). Per chain the accept length needed is the measured
verify cycle x the baseline's tok/s (at each probe's own baseline); the accept length reached is the
served one where the tune launched that chain, its model's prediction elsewhere, beside the
drafter's offline prediction on the probe's prompts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SIZES = ("ninth", "third", "trained")


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def _chain(key: str) -> int:
    return int(key[1:key.index("-")])


def _fmt(x: Any, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def offline(pred: Any, steps: int) -> float | None:
    """The offline served walk's accept length per request at `steps`, over all prompts."""
    if not isinstance(pred, dict):
        return None
    group = (pred.get("groups") or {}).get("all") or {}
    value = (group.get("predicted_per_request") or {}).get(f"steps{steps}_topk1_draft{steps + 1}")
    return float(value) if value is not None else None


def figure(verdict: Any, name: str) -> dict[str, Any] | None:
    return ((verdict or {}).get("figures") or {}).get(name)


def claim(verdict: Any, cid: str) -> dict[str, Any] | None:
    return next((c for c in (verdict or {}).get("claims", []) if c["id"] == cid), None)


def trainings_asked(earn: dict[str, Any]) -> list[str] | None:
    """The --trainings of the run's last train stage (earn.json's args, recorded as text), or
    None where the record does not say."""
    import ast

    stages = [v for k, v in (earn.get("args") or {}).items() if "train" in k.split(",")]
    try:
        names = ast.literal_eval(str(stages[-1].get("trainings"))) if stages else None
    except (ValueError, SyntaxError):
        return None
    return [str(n) for n in names] if isinstance(names, list) else None


def report(out: Path, others: tuple[Path, ...] = ()
           ) -> tuple[str, list[tuple[float, float | None, float | None, str]]]:
    earn = _load(out / "earn.json") or {}
    lines: list[str] = []
    a = earn.get("answers") or {}
    w = earn.get("written") or {}
    lines += ["## Data", "",
              f"- prompts written by the model: {w.get('kept')} usable of "
              f"{w.get('written', w.get('requests'))} asks written ({w.get('dropped')}), "
              f"{w.get('tokens')} tokens in {w.get('seconds')} s",
              f"- answers: {a.get('prompts')} prompts ({a.get('written')} written, "
              f"{a.get('tasks')} templated), {a.get('answer_tokens')} answer tokens in "
              f"{a.get('seconds')} s = {a.get('tok_per_s')} tok/s; per kind {a.get('per_kind')}"
              + (" (stopped by the generation deadline)" if a.get("stopped_by_gen_deadline")
                 else ""),
              ""]
    if w.get("written") is not None and w.get("written") != w.get("requests"):
        lines.insert(-3, f"- the writing stopped at its share of the generation time: "
                         f"{w.get('written')} of {w.get('requests')} asks written")
    lines += ["## Drafters", "",
              "| drafter | samples | answer tokens | epochs | updates | train s | sha256 | "
              "predicted accept length, 1-5 steps |", "|---|---|---|---|---|---|---|---|"]
    trained = sorted(p.name for p in (out / "drafters").glob("*") if p.is_dir()) \
        if (out / "drafters").is_dir() else []
    order = ["trained", "trained-again", "third", "third-again", "ninth", "ninth-again"]
    for name in sorted(trained, key=lambda n: (order.index(n) if n in order else len(order), n)):
        s = _load(out / "drafters" / name / "summary.json") or {}
        pred = _load(out / "drafters" / name / "prediction.json")
        preds = ", ".join(_fmt(offline(pred, k)) for k in range(1, 6))
        lines.append(f"| {name} | {s.get('samples')} | {s.get('answer_tokens')} | "
                     f"{s.get('epochs_done')}/{s.get('epochs')} | {s.get('updates')} | "
                     f"{s.get('train_s')} | `{str(s.get('sha256'))[:16]}…` | {preds} |")
    lines += ["", "The same command run twice:", ""]
    again = earn.get("sha256_reproduced")
    if isinstance(again, bool):  # a record that kept one answer for trained / trained-again
        lines.append(f"- trained: {'the same sha256' if again else 'DIFFERENT sha256'}")
    elif not again:
        lines.append("- no second run")
    for name, row in (again.items() if isinstance(again, dict) else []):
        same = row.get("same")
        lines.append(f"- {name}: " + ("the same sha256" if same else "DIFFERENT sha256"
                                      if same is False else str(row.get("why"))) +
                     f" (`{str(row.get('first'))[:16]}…`, `{str(row.get('again'))[:16]}…`)")
    if earn.get("again_skipped"):
        lines.append(f"- {earn['again_skipped']}")
    lines.append("")

    pad = (earn.get("served_target") or {}).get("padding")
    if isinstance(pad, dict):  # the tune and the probes served pad_target.py's widening
        lines += ["## Served target", "",
                  f"The tune and the probes served the target widened by pad_target.py: "
                  f"intermediate size {pad.get('source_intermediate_size')} -> "
                  f"{earn['served_target'].get('intermediate_size')}, "
                  f"{_fmt(float(pad.get('step_bytes') or 0) / 1e9, 2)} GB read a decode step "
                  f"against {_fmt(float(pad.get('source_step_bytes') or 0) / 1e9, 3)} GB; "
                  "each widened MLP against the original on random input: largest relative "
                  f"difference {float(pad.get('max_relative_mlp_difference') or 0):.1e}. The "
                  "data, the trainings and the held-out dump used the target itself.", ""]

    bases = []  # (probe, its baseline's tok/s): each probe launched its own baseline
    for k in (1, 2):
        base = figure(_load(out / f"probe-{k}" / "verdict.json"), "baseline_tps")
        if base and base.get("value"):
            bases.append((f"probe-{k}", float(base["value"])))
    tune = _load(out / "tune" / "tune.json")
    judged = str(earn.get("judged") or "trained")  # the drafter the probes served
    tuned = str((earn.get("tune") or {}).get("judge") or "trained")  # the one the tune served
    tuned_pred = _load(out / "drafters" / tuned / "prediction.json")
    if tune:
        fit = tune.get("cycle_fit") or {}
        at = " / ".join(f"{n}'s {_fmt(b, 1)}" for n, b in bases) or "none measured"
        lines += ["## Chains (tune)", "", f"Drafter: {tuned}.", "",
                  f"Best: {tune.get('best')} ({tune.get('stop_reason', 'done')}). Accept length "
                  f"needed = the tune's cycle x each probe's baseline ({at} tok/s); the "
                  "probes' own break-evens (their cycle x their baseline) are in the Probes "
                  "table. A chain not launched has the tune's cycle model"
                  + (f" ({fit['how']})" if fit.get("how") else "")
                  + " and its chain model's accept length.", "",
                  "| chain | launched | tune's cycle ms | break-even (needed) | accept length "
                  "reached | offline prediction | short by |", "|---|---|---|---|---|---|---|"]
        measured = {t["key"]: t for t in tune.get("trials", [])}
        for key, p in sorted((tune.get("predictions") or {}).items(), key=lambda kv:
                             _chain(kv[0])):
            t = measured.get(key)
            stats = (((t or {}).get("run") or {}).get("measurement") or {}).get("stats") or {}
            cycle = (stats.get("cycle_ms") or {}).get("mean") or p.get("cycle_ms")
            reached = (stats.get("tau_decode") or {}).get("mean") or p.get("tau")
            needs = [cycle * b / 1000.0 if cycle else None for _, b in bases]
            shorts = [n - reached if n is not None and reached is not None else None
                      for n in needs]
            lines.append(f"| {key} | {'yes' if t else 'no (predicted)'} | {_fmt(cycle, 2)} | "
                         f"{' / '.join(_fmt(n) for n in needs) or '—'} | {_fmt(reached)} | "
                         f"{_fmt(offline(tuned_pred, _chain(key)))} | "
                         f"{' / '.join(_fmt(x) for x in shorts) or '—'} |")
        lines.append("")
    lines += ["## Probes", "", f"Drafter: {judged}.", "",
              "| probe | outcome | baseline tok/s | accept length | break-even | speed-up | "
              "regress.accept_len | regress.tps |", "|---|---|---|---|---|---|---|---|"]
    for k in (1, 2):
        v = _load(out / f"probe-{k}" / "verdict.json")
        if v is None:
            continue
        cells = [(figure(v, f) or {}).get("text", "—")
                 for f in ("baseline_tps", "accept_len", "breakeven", "speedup")]
        regs = [(claim(v, c) or {}).get("status", "—")
                for c in ("regress.accept_len", "regress.tps")]
        lines.append(f"| probe-{k} | {v.get('outcome')} | " + " | ".join(cells + regs) + " |")
    lines.append("")
    curve: list[tuple[float, float | None, float | None, str]] = []
    served = earn.get("served_sizes") or {}
    steps = int(earn.get("served_steps") or 3)
    for name in SIZES:
        s = _load(out / "drafters" / name / "summary.json") or {}
        pred = offline(_load(out / "drafters" / name / "prediction.json"), steps)
        got = (served.get(name) or {}).get("accept_len")
        if s.get("answer_tokens"):
            curve.append((float(s["answer_tokens"]), got, pred, name))
            continue
        for other in others:  # --with: a size served at the same chain by another run
            o_earn = _load(other / "earn.json") or {}
            o_got = ((o_earn.get("served_sizes") or {}).get(name) or {}).get("accept_len")
            o_sum = _load(other / "drafters" / name / "summary.json") or {}
            if o_earn.get("served_steps") == steps and o_got is not None \
                    and o_sum.get("answer_tokens"):
                o_pred = offline(_load(other / "drafters" / name / "prediction.json"), steps)
                curve.append((float(o_sum["answer_tokens"]), o_got, o_pred,
                              f"{name} ({other.resolve().name})"))
                break
    curve.sort(key=lambda c: c[0])
    lines += [f"## Data size (served at {steps} steps)", "",
              "| drafter | answer tokens | served accept length | offline prediction |",
              "|---|---|---|---|"]
    lines += [f"| {n} | {int(t)} | {_fmt(g)} | {_fmt(p)} |" for t, g, p, n in curve]
    evens = []  # each probe's break-even: what a size's accept length must reach at this chain
    for k in (1, 2):
        even = figure(_load(out / f"probe-{k}" / "verdict.json"), "breakeven")
        if even and even.get("value") is not None:
            evens.append(f"{_fmt(float(even['value']))} (probe-{k})")
    if curve and evens:
        lines += ["", f"Break-even at {steps} steps: {' / '.join(evens)}: the accept length "
                      "a drafter must reach here to pay."]
    missing = [n for n in SIZES if n not in {c[3].split(" (")[0] for c in curve}]
    asked = trainings_asked(earn)
    unasked = [n for n in missing if asked is not None and n not in asked]
    failed = [n for n in missing if n not in unasked]
    if unasked:
        lines += ["", f"Not served: {', '.join(unasked)} (not among this run's --trainings)."]
    if failed:
        lines += ["", f"Not served: {', '.join(failed)} (no trained drafter; "
                      "earn.json's drafters and logs/earn.log say why)."]
    return "\n".join(lines) + "\n", curve


def plot(curve: list[tuple[float, float | None, float | None, str]], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [t / 1e6 for t, *_ in curve]
    ax.plot(xs, [g for _, g, _, _ in curve], "o-", label="served (SGLang)")
    ax.plot(xs, [p for _, _, p, _ in curve], "s--", label="offline prediction")
    for x, (_, g, _, n) in zip(xs, curve, strict=True):
        if g is not None:
            ax.annotate(n.split(" (")[0], (x, g), textcoords="offset points", xytext=(4, 4))
    ax.set_xscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda x, _pos: f"{x:g}")
    ax.xaxis.set_major_formatter(plain)
    if xs and max(xs) < 10 * min(xs):  # within one decade the minor ticks are the only labels
        lo, hi = min(xs) / 1.05, max(xs) * 1.05  # the margins' ticks unlabelled: they crowd
        ax.xaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
            lambda x, _pos: f"{x:g}" if lo <= x <= hi else ""))
    ax.margins(x=0.12, y=0.1)
    ax.set_xlabel("training answer tokens (millions)")
    ax.set_ylabel("accept length (tokens per verify)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--with", dest="others", type=Path, action="append", default=[],
                    help="another run's OUT: the sizes it served at the same chain and this "
                         "run did not join the data-size curve, named by its folder")
    args = ap.parse_args(argv)
    if not (args.out / "earn.json").exists():
        print(f"{args.out}: no earn.json (the out/ folder of an earn.py run)", file=sys.stderr)
        return 2
    for other in args.others:
        if not (other / "earn.json").exists():
            print(f"--with {other}: no earn.json (the out/ folder of an earn.py run)",
                  file=sys.stderr)
            return 2
    text, curve = report(args.out, tuple(args.others))
    (args.md or args.out / "summary.md").write_text(text)
    if curve:
        plot(curve, args.plot or args.out / "data-size.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
