"""The launch-spread model against the launches it was fitted to: for each target launched again
and again on real SGLang, its class, its measured spread, the spread specgate's model gives its
class, and the same prior pooled without that target's own launches (what a deployment of that
target would get on its first probe had it never been measured). Then, for each launch of the
targets whose launch records keep every request, whether the baseline interval a first probe
would report (the launch's requests, widened by its class's prior) covers the launch-to-launch
truth, the geometric mean of the other launches' medians: with the prior specgate ships, and
with that prior pooled without the target's own launches.

    python -m benchmarks.launch_spread_model [--records FILE ...] [--json OUT.json]

Reads the priors of specgate/results/drift.py and the launch records committed under
benchmarks/results/ (launch_records.py's JSON). Runs in a second on any machine.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from specgate.results import deployment, drift
from specgate.results.stats import summarize

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "benchmarks" / "results"
RECORDS = (
    RESULTS / "2026-12-03-h200-launch-spread" / "launch-records" / "launch-records.json",
    RESULTS / "2026-12-03-h200-llama-shapes-dummy" / "launch-records"
    / "launch-records-llama8b-shapes.json",
)
# The prior tables' groups that launch records name (records target -> prior group).
GROUP_OF = {
    "llama8b-shapes": ("tps", "H200: Llama-3-8B shapes, dummy weights"),
    "llama1b-shapes": ("tps", "Llama-3.2-1B shapes, dummy weights"),
    "smollm2-135m-instruct": ("tps", "SmolLM2-135M-Instruct, launch records"),
}
PEAK_H200 = 4.8e12
CONFIDENCE = 0.975


def sd_ln(values: tuple[float, ...]) -> float:
    return statistics.stdev(math.log(v) for v in values)


def groups() -> list[dict[str, Any]]:
    """Every group of both prior tables, with the pool it belongs to."""
    out = []
    for pool, table in (("GPU-bound", drift.GPU_BOUND_LAUNCHES),
                        ("host-bound", drift.PRIOR_LAUNCHES)):
        for figure, named in table.items():
            for name, values in named.items():
                out.append({"pool": pool, "figure": figure, "group": name, "values": values})
    return out


def without(pool: str, figure: str, group: str) -> tuple[float, int]:
    """The pool's prior of a figure with one group left out (nan when nothing is left)."""
    table = drift.PRIORS["GPU-bound" if pool == "GPU-bound" else "host-bound"][figure]
    sd, df, _, _ = drift.pooled_sd(v for k, v in table.items() if k != group)
    return sd, df


def model_table() -> list[dict[str, Any]]:
    rows = []
    for g in groups():
        prior = drift.prior(g["figure"], "GPU-bound" if g["pool"] == "GPU-bound" else "unknown")
        loo_sd, loo_df = without(g["pool"], g["figure"], g["group"])
        measured = sd_ln(g["values"])
        rows.append({
            "pool": g["pool"], "figure": g["figure"], "group": g["group"],
            "launches": len(g["values"]), "measured_sd": round(measured, 5),
            "model_sd": round(prior.sd, 5), "model_df": prior.df,
            "left_out_sd": None if math.isnan(loo_sd) else round(loo_sd, 5),
            "left_out_df": loo_df,
            "ratio_left_out": None if math.isnan(loo_sd) or measured == 0
            else round(loo_sd / measured, 3),
        })
    return rows


def coverage(path: Path) -> list[dict[str, Any]]:
    """Per target of one records file: per launch, the first probe's baseline interval (its
    class's prior with this target's group left out) and which other launches it covers."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for name, target in doc["targets"].items():
        if name not in GROUP_OF:
            continue
        figure, group = GROUP_OF[name]
        launches = [r for r in target["launches"] if r.get("requests")]
        medians = [r["median_tok_s"] for r in launches]
        share = target["weight_bytes"] * statistics.median(medians) / PEAK_H200
        kind = ("GPU-bound" if share >= deployment.GPU_BOUND_SHARE
                else "host-bound" if share < deployment.HOST_BOUND_SHARE else "between")
        pool = "GPU-bound" if kind == "GPU-bound" else "host-bound"
        shipped = drift.prior(figure, kind)
        sd, df = without(pool, figure, group)
        terms = {"shipped": drift.Term(shipped.sd**2, shipped.df),
                 "left_out": drift.Term(sd**2, float(df))}
        covered = dict.fromkeys(terms, 0)
        rows = []
        for i, launch in enumerate(launches):
            rates = [q["completion_tokens"] / q["e2e_latency_s"] for q in launch["requests"]]
            others = [math.log(m) for j, m in enumerate(medians) if j != i]
            truth = math.exp(statistics.fmean(others))
            row: dict[str, Any] = {"launch": i, "truth_tok_s": round(truth, 2)}
            for key, term in terms.items():
                judged = drift.widen(summarize(rates, CONFIDENCE), term)
                hit = judged.ci_low <= truth <= judged.ci_high
                covered[key] += hit
                row[key] = {"mean_tok_s": round(judged.mean, 2),
                            "interval": [round(judged.ci_low, 1), round(judged.ci_high, 1)],
                            "covers": hit}
            rows.append(row)
        total = len(launches)
        out.append({"records": str(path.relative_to(ROOT)), "target": name, "class": kind,
                    "share": round(share, 3), "prior_sd": round(shipped.sd, 5),
                    "prior_df": shipped.df, "prior_left_out_sd": round(sd, 5),
                    "prior_left_out_df": df, "measured_sd": round(sd_ln(tuple(medians)), 5),
                    "covered": {k: f"{v}/{total}" for k, v in covered.items()},
                    "launches": rows})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=Path, nargs="+", default=list(RECORDS))
    parser.add_argument("--json", type=Path, help="also write the tables here")
    ns = parser.parse_args(argv)
    table = model_table()
    print("| prior | figure | group | launches | measured | model | without this group |")
    print("|---|---|---|---|---|---|---|")
    for r in table:
        left = (f"{r['left_out_sd'] * 100:.2f} % (ν = {r['left_out_df']})"
                if r["left_out_sd"] is not None else "— (no other group)")
        print(f"| {r['pool']} | {r['figure']} | {r['group']} | {r['launches']} | "
              f"{r['measured_sd'] * 100:.2f} % | {r['model_sd'] * 100:.2f} % "
              f"(ν = {r['model_df']:g}) | {left} |")
    covers = [c for path in ns.records for c in coverage(path)]
    print()
    for c in covers:
        print(f"{c['target']} ({c['class']}, {c['share'] * 100:.0f} % of the H200's bandwidth): "
              f"measured spread {c['measured_sd'] * 100:.2f} %; the {CONFIDENCE * 100:g} % "
              f"baseline interval of a launch covers the other launches' geometric mean in "
              f"{c['covered']['shipped']} launches with the prior shipped "
              f"({c['prior_sd'] * 100:.2f} %, ν = {c['prior_df']:g}), in "
              f"{c['covered']['left_out']} with it pooled without this target "
              f"({c['prior_left_out_sd'] * 100:.2f} %, ν = {c['prior_left_out_df']})")
        for row in c["launches"]:
            said = {k: "covers" if row[k]["covers"] else "MISSES" for k in ("shipped", "left_out")}
            print(f"  launch {row['launch']}: others {row['truth_tok_s']} tok/s; shipped "
                  f"{row['shipped']['interval']} {said['shipped']}; without "
                  f"{row['left_out']['interval']} {said['left_out']}")
    if ns.json:
        ns.json.write_text(json.dumps({"model": table, "coverage": covers}, indent=1) + "\n",
                           encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
