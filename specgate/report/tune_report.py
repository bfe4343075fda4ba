"""`specgate tune`: the command, and its output (table, plot, profile snippet, Allure result)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path
from typing import Any

from specgate.plot.tune import plot
from specgate.results.stats import percent
from specgate.results.tune import FIRST_FAILED, TuneResult

TABLE_FILE = "tune.md"
PLOT_FILE = "tune.png"
SNIPPET_FILE = "recommended.toml"


def _ci(summary: dict[str, Any] | None, digits: int) -> str:
    if not summary or summary.get("mean") is None:
        return "—"
    mean = float(summary["mean"])
    lo, hi = summary.get("ci_low"), summary.get("ci_high")
    if lo is None or hi is None:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} [{float(lo):.{digits}f}, {float(hi):.{digits}f}]"


def table(result: TuneResult) -> str:
    """Markdown: every candidate with predicted and measured accept length and tok/s."""
    pct = percent(result.confidence)
    head = ("| configuration | launch | predicted accept length | measured accept length "
            f"({pct} % CI) | predicted tok/s | measured tok/s ({pct} % CI) | speed-up over the "
            "best then | status |")
    lines = [head, "|" + "---|" * 8]
    for c in result.candidates:
        p = result.predictions.get(c.key)
        tr = result.trial(c)
        m = tr.measurement if tr else None
        pred_then = tr.predicted if tr and tr.predicted else None
        ptau = f"{p.tau:.3f}" if p else "—"
        ptps = f"{p.tps:.1f}" if p else "—"
        if pred_then is not None:  # what the model said when it chose this launch
            ptps += f" (at launch {pred_then.tps:.1f})"
        tau = _ci(m.stats["tau_decode"].to_json(), 3) if m and "tau_decode" in m.stats else "—"
        tps = _ci(m.stats["tps"].to_json(), 1) if m and "tps" in m.stats else "—"
        vs = _ci(tr.vs_best.to_json(), 3) if tr and tr.vs_best else "—"
        status = (f"**{tr.status}**" if tr and tr.status == "best" else
                  tr.status if tr else _not_launched(result, c.key))
        if tr and tr.note and tr.status != "best":
            status += f": {tr.note}"
        lines.append(f"| {c.key} | {tr.launch if tr else '—'} | {ptau} | {tau} | {ptps} | "
                     f"{tps} | {vs} | {status} |")
    return "\n".join(lines)


def summary_text(result: TuneResult) -> str:
    fit = result.fit
    base = result.baseline.measurement if result.baseline else None
    base_tps = base.stat("tps") if base else None
    lines = [f"# specgate tune: {result.profile}" + (" (simulated server)"
                                                     if result.simulated else ""), ""]
    if result.best is not None:
        lines.append(f"Recommended: `{' '.join(result.best.flags)}`"
                     + (f" ({_speedup_vs(result, base_tps.mean)})" if base_tps else ""))
        against = _against_baseline(result)
        if against:
            lines += ["", against]
        edge = _unsettled(result) or _edge(result)
        if edge:
            lines += ["", edge]
    else:
        lines.append("No recommendation: " + result.stop_reason)
    lines += ["", f"{result.launches} launches ({len(result.trials)} speculative"
              + (", 1 baseline" if result.launches > len(result.trials) else "")
              + f"), {result.requests} requests; a full grid of the {len(result.candidates)} "
              "configurations would launch each one.",
              f"Stopped: {result.stop_reason}.",
              "Per-position conditional acceptance (from spec_correct_drafts_histogram): "
              + ", ".join(f"p{k + 1} = {a:.3f}" for k, a in enumerate(result.acceptance)) + ".",
              (f"Cycle time: {fit.intercept_ms:.3f} ms + {fit.slope_ms:.3f} ms × steps "
               f"({fit.how})." if fit else "Cycle time: not fitted."),
              f"Baseline: {result.baseline_note}"
              + (f", {base_tps.describe('tok/s', 1)}" if base_tps else "") + ".",
              "", table(result), "", *_levels_section(result),
              "Predicted accept length is the chain model's tokens per verify over decode "
              "(compare the measured tau_decode); predictions are for chains (topk 1) only. A "
              "configuration is launched only while its predicted tok/s is within [tune] margin "
              "of the best measured, and dropped as soon as its paired per-prompt speed-up "
              "over the best is confidently below 1."]
    return "\n".join(lines) + "\n"


def _levels_section(result: TuneResult) -> list[str]:
    """Per [bench] concurrency level: each measured chain's paired speed-up over the baseline
    at that level, and the fastest measured chain there (the race itself ran at the gate's)."""
    if len(result.levels) < 2:
        return []
    rows = result.per_level
    keys = [tr.candidate.key for tr in result.trials if tr.status != "failed"]
    pct = percent(result.confidence)
    lines = [f"Per concurrency level (requests in flight; the race ran at "
             f"{result.gate_level}): speed-up over the baseline at that level, decode tok/s "
             f"per request paired by prompt ({pct} % CI), and the fastest measured chain.", "",
             "| in flight | " + " | ".join(keys) + " | fastest measured |",
             "|" + "---|" * (len(keys) + 2)]
    for row in rows:
        cells = [_ci(row.speedups[k].to_json(), 3) if k in row.speedups else "—" for k in keys]
        fastest = f"**{row.fastest}**" if row.fastest else "—"
        gate = " (gate)" if row.level == result.gate_level else ""
        lines.append(f"| {row.level}{gate} | " + " | ".join(cells) + f" | {fastest} |")
    lines += ["", "The fastest measured chain at a level is the one with the highest mean; "
              "chains whose intervals overlap there are not separated.", ""]
    return lines


# The stop reasons of a race that settled: whatever was not launched was predicted slower.
SETTLED = ("no configuration left is predicted within", "every configuration was measured")


def _best_tps(result: TuneResult) -> float | None:
    tr = result.trial(result.best) if result.best else None
    tps = tr.measurement.stat("tps") if tr and tr.measurement else None
    return tps.mean if tps else None


def _unlaunched_faster(result: TuneResult) -> list[str]:
    """The configurations never measured that the race might still have launched: when it
    stopped before settling (interrupted, max_launches, a failed first launch), those predicted
    at least as fast as the best measured, or all of them when nothing was measured."""
    if result.stop_reason.startswith(SETTLED):
        return []
    best = _best_tps(result)
    return [c.key for c in result.candidates if result.trial(c) is None and (
        best is None or c.key not in result.predictions
        or result.predictions[c.key].tps >= best)]


def _not_launched(result: TuneResult, key: str) -> str:
    """Why a configuration has no measurement: predicted slower, or the race stopped first."""
    if key in _unlaunched_faster(result):
        failed = [tr for tr in result.trials if tr.status == "failed"]
        if result.stop_reason.startswith(FIRST_FAILED) and failed:
            # Its row says why, once.
            return (f"not measured: the race stopped first ({FIRST_FAILED}: "
                    f"{failed[0].candidate.key})")
        return f"not measured: the race stopped first ({result.stop_reason})"
    return "not launched (predicted slower)"


def _unsettled(result: TuneResult) -> str:
    """A warning that the recommendation is not the race's answer: configurations predicted
    faster than the best measured were never measured."""
    keys = _unlaunched_faster(result)
    best = _best_tps(result)
    if not keys or best is None:
        return ""
    preds = ", ".join(f"{k} ({result.predictions[k].tps:.1f} tok/s)"
                      if k in result.predictions else k for k in keys)
    return (f"Not settled: the race stopped ({result.stop_reason}) before measuring {preds}, "
            f"predicted faster than the best measured ({best:.1f} tok/s); the recommendation "
            "is only the best of what was measured.")


def _against_baseline(result: TuneResult) -> str:
    """The best's paired per-prompt speed-up over the baseline, with its interval: the figure a
    probe of the recommended flags would judge (spec.speedup)."""
    ratio = result.against_baseline
    if ratio is None:
        return ""
    verdict = ratio.compare(1.0)
    if verdict == "no_interval":
        return (f"Against the baseline: paired per-prompt speed-up {ratio.mean:.3f} (too few "
                "prompts measured by both for an interval).")
    pct = percent(ratio.confidence)
    said = {"above": "faster than the baseline",
            "below": "slower than the baseline: speculative decoding does not pay here",
            }.get(verdict, "not shown faster than the baseline: the interval contains 1, so a "
                           "probe of these flags may well fail spec.speedup")
    return (f"Against the baseline: paired per-prompt speed-up {ratio.mean:.3f}, {pct} % CI "
            f"[{ratio.ci_low:.3f}, {ratio.ci_high:.3f}]: {said}.")


def _edge(result: TuneResult) -> str:
    """A warning when the best is the longest or shortest chain considered."""
    if result.best is None or len(result.candidates) < 2:
        return ""
    steps = [c.steps for c in result.candidates]
    if result.best.steps == max(steps):
        return (f"The fastest measured is the longest chain considered ({max(steps)} steps): a "
                "longer one may be faster still; add longer chains to [tune] steps.")
    if result.best.steps == min(steps) and min(steps) > 1:
        return (f"The fastest measured is the shortest chain considered ({min(steps)} steps): "
                "a shorter one may be faster still; add shorter chains to [tune] steps.")
    return ""


def _speedup_vs(result: TuneResult, base_tps: float) -> str:
    tr = result.trial(result.best) if result.best else None
    m = tr.measurement if tr else None
    tps = m.stat("tps") if m else None
    if tps is None or not base_tps:
        return ""
    return f"{tps.mean:.1f} tok/s, {tps.mean / base_tps:.2f}× the baseline's {base_tps:.1f}"


def snippet(result: TuneResult, algorithm: str = "EAGLE3") -> str:
    if result.best is None:
        return "# specgate tune found no configuration: " + result.stop_reason + "\n"
    b = result.best
    tr = result.trial(b)
    tps = tr.measurement.stat("tps") if tr and tr.measurement else None
    said = f" ({tps.describe('tok/s', 1)})" if tps else ""
    return (f"# specgate tune, {result.finished_at}: fastest measured chain{said}\n"
            f"[speculative]\nalgorithm = \"{algorithm}\"\nnum_steps = {b.steps}\n"
            f"eagle_topk = {b.topk}\nnum_draft_tokens = {b.draft_tokens}\n")


def write_outputs(result: TuneResult, reports_dir: Path, algorithm: str = "EAGLE3"
                  ) -> dict[str, Path]:
    """tune.md, tune.png and recommended.toml beside tune.json, and an Allure result."""
    out = reports_dir / "tune"
    out.mkdir(parents=True, exist_ok=True)
    paths = {"table": out / TABLE_FILE, "plot": out / PLOT_FILE, "snippet": out / SNIPPET_FILE,
             "json": out / "tune.json"}
    paths["table"].write_text(summary_text(result), encoding="utf-8")
    paths["snippet"].write_text(snippet(result, algorithm), encoding="utf-8")
    paths["plot"].write_bytes(plot(result))
    paths["allure"] = write_allure(result, reports_dir / "allure-results", paths)
    return paths


def write_allure(result: TuneResult, results_dir: Path, paths: dict[str, Path]) -> Path:
    """The tune section of the report: one result (feature `tune`) with the files attached."""
    results_dir.mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000)
    attachments = []
    for name, key, mime, ext in (("tune table", "table", "text/markdown", "md"),
                                 ("tune plot", "plot", "image/png", "png"),
                                 ("recommended [speculative]", "snippet", "text/plain", "toml"),
                                 ("tune.json", "json", "application/json", "json")):
        source = f"{uuid.uuid4()}-attachment.{ext}"
        (results_dir / source).write_bytes(paths[key].read_bytes())
        attachments.append({"name": name, "source": source, "type": mime})
    full = f"specgate.tune.{result.profile}"
    best = result.best.key if result.best else "none"
    doc = {"uuid": str(uuid.uuid4()), "historyId": hashlib.md5(full.encode()).hexdigest(),
           "name": f"tune: best {best}", "fullName": full,
           "status": "passed" if result.best else "broken",
           "statusDetails": {"message": f"recommended {best}; {result.launches} launches, "
                                        f"{result.requests} requests; {result.stop_reason}"},
           "stage": "finished", "start": now, "stop": now,
           "labels": [{"name": "epic", "value": "Tuning"}, {"name": "feature", "value": "tune"},
                      {"name": "story", "value": "tune"}, {"name": "framework",
                                                           "value": "specgate"}],
           "parameters": [], "attachments": attachments,
           "description": summary_text(result)}
    path = results_dir / f"{doc['uuid']}-result.json"
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


__all__ = ["snippet", "summary_text", "table", "write_outputs"]
