"""`specgate tune`: the fastest speculative chain configuration from few launches.

SGLang's own answer (scripts/playground/bench_speculative.py) launches once per configuration of
a grid and runs a fixed number of prompts on each. Here:

1. One launch at the largest `[tune] steps` (topk 1, steps + 1 draft tokens) measures the
   conditional acceptance of every draft position (from `spec_correct_drafts_histogram`: of the
   verify passes that reached position k, the share that accepted it) and the cycle time.
2. The chain model (model/predict.py: tau(s) = 1 + Σ_{k≤s} Π_{j≤k} p_j) predicts the tokens per
   verify of every shorter chain exactly from those positions; the cycle time is a straight line
   in the steps, cycle(s) = a + b·s, fitted to the configurations measured so far (before a
   second point exists, the line runs through the baseline's time per decode step at s = 0:
   a verify of one token costs about one decode step). Predicted decode tok/s = tau / cycle.
3. The configuration with the highest prediction is launched next, only while its prediction is
   within `[tune] margin` of the best measured tok/s, and raced against the best with the gate's
   statistics: the paired per-prompt speed-up (measure/bench.speedup) at bench.judged_confidence,
   `[tune] repeats` passes before the first look, more (up to bench.max_repeats) while the
   interval straddles 1. It is dropped as soon as it is confidently slower; a confidently faster
   one becomes the best. Each launch adds a point to the cycle fit and histograms to the
   acceptance estimate, and the predictions are made again.

With several [bench] concurrency levels every launch measures each of them; the race is run at
the gate's level, and the output gives each measured chain's paired speed-up over the baseline
at every level, and the fastest measured chain per level (per_level).

Assumptions, said in the output: chains only (topk 1). A chain's histogram says nothing about
how often a second-ranked draft token would have been right, so topk > 1 trees are not predicted
(SGLang's tree verify also changes the cycle cost in ways a line in the steps does not capture).
Acceptance at position k does not depend on how many positions follow (true of a chain: the
drafter proposes position k before it knows the chain's length).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from specgate.core.errors import SpecgateError
from specgate.core.profile import Profile, TuneSection
from specgate.measure import plan as live_plan
from specgate.measure import reuse
from specgate.measure.plan import LivePlan
from specgate.measure.server_session import Progress, run_config
from specgate.model import predict
from specgate.results import bench, stats
from specgate.results.live import ConfigRun
from specgate.results.stats import Summary
from specgate.results.tune import (
    FIRST_FAILED,
    RESULT_FILE,
    Candidate,
    CycleFit,
    LevelRow,
    Prediction,
    Trial,
    TuneResult,
)
from specgate.serving.launch import LaunchSettings

# run_config's shape: runner(plan, config, *, baseline=, progress=, keep_going=) -> ConfigRun
Runner = Callable[..., ConfigRun]


def conditional_acceptance(runs: Sequence[tuple[int, bench.Measurement]]) -> list[float]:
    """p_k per draft position, pooled over runs of chains of different lengths.

    From each request's spec_correct_drafts_histogram h (h[j] = verify passes that accepted j
    drafts; SGLang trims it after the last non-zero entry): passes reaching position k are
    Σ_{j≥k−1} h[j], those accepting it Σ_{j≥k} h[j]. A run without histograms contributes the
    equal rate that gives its measured tokens per verify (stats.required_rate) at each position.
    """
    reach: dict[int, float] = {}
    accepted: dict[int, float] = {}
    for steps, m in runs:
        hists = [s.drafts_histogram for s in m.samples if s.drafts_histogram]
        if hists:
            total = [0] * (steps + 1)
            for h in hists:
                for j, count in enumerate(h[: steps + 1]):
                    total[j] += count
            for k in range(1, steps + 1):
                reach[k] = reach.get(k, 0.0) + sum(total[k - 1:])
                accepted[k] = accepted.get(k, 0.0) + sum(total[k:])
            continue
        tau = m.stat("tau_decode")
        rate = stats.required_rate(tau.mean, steps) if tau is not None else None
        if rate is None:
            continue
        for k in range(1, steps + 1):  # one pseudo-count per verify pass at the equal rate
            verifies = sum(s.verify_ct or 0 for s in m.samples)
            passes = verifies * rate ** (k - 1)
            reach[k] = reach.get(k, 0.0) + passes
            accepted[k] = accepted.get(k, 0.0) + passes * rate
    out = []
    for k in range(1, max(reach, default=0) + 1):
        out.append(accepted.get(k, 0.0) / reach[k] if reach.get(k) else 0.0)
    return out


def fit_cycle(points: Sequence[tuple[int, float]],
              prior_intercept_ms: float | None = None) -> CycleFit:
    """The cycle-time line from measured (steps, cycle ms) points (least squares)."""
    pts = tuple(sorted(points))
    distinct = sorted({s for s, _ in pts})
    if not pts:
        raise ValueError("no measured cycle time to fit")
    if len(distinct) >= 2:
        n = len(pts)
        mx = sum(s for s, _ in pts) / n
        my = sum(c for _, c in pts) / n
        sxx = sum((s - mx) ** 2 for s, _ in pts)
        slope = sum((s - mx) * (c - my) for s, c in pts) / sxx
        return CycleFit(my - slope * mx, slope, pts,
                        f"least squares over {n} measured configurations")
    s0 = distinct[0]
    c0 = sum(c for _, c in pts) / len(pts)
    if prior_intercept_ms is not None and 0 < prior_intercept_ms < c0 and s0 > 0:
        return CycleFit(prior_intercept_ms, (c0 - prior_intercept_ms) / s0, pts,
                        "one measured configuration and the baseline's decode step at 0 steps")
    slope = c0 / (s0 + 1)
    return CycleFit(slope, slope, pts, "one measured configuration, cycle ∝ steps + 1 "
                    "(no baseline)")


def predict_one(candidate: Candidate, acceptance: Sequence[float], fit: CycleFit) -> Prediction:
    rates = list(acceptance) or [0.0]
    while len(rates) < candidate.steps:  # beyond the measured positions: the last one's rate
        rates.append(rates[-1])
    tau = predict.accept_length(rates, candidate.steps)
    cycle = fit.at(candidate.steps)
    return Prediction(tau, cycle, 1000.0 * tau / cycle if cycle > 0 else math.nan)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def candidate_profile(profile: Profile, candidate: Candidate) -> Profile:
    """The profile with this chain in [speculative]."""
    spec = profile.speculative.model_copy(update={
        "num_steps": candidate.steps, "eagle_topk": candidate.topk,
        "num_draft_tokens": candidate.draft_tokens})
    return profile.model_copy(update={"speculative": spec})


def tune_sampling(sampling: bench.Sampling, tune: TuneSection) -> bench.Sampling:
    """[tune] repeats passes before the first look, more up to [bench] max_repeats."""
    return dataclasses.replace(sampling, repeats=tune.repeats,
                               max_repeats=max(sampling.max_repeats, tune.repeats))


def _settings(profile: Profile) -> LaunchSettings | str:
    """The profile's launch settings, or why they cannot be read (the launch is then Blocked)."""
    try:
        return LaunchSettings.of(profile)
    except SpecgateError as exc:
        return str(exc)


def cannot_launch(profile: Profile, reports_dir: Path) -> str | None:
    """Why no launch of a tune can start, found before anything is launched or written: the
    profile's launch settings cannot be read, or the SGLang its launcher runs is missing or
    refuses the launch command. None where a launch may start (and for an attached server or
    the simulator, which are not checked here)."""
    from specgate.serving.launch import ServerPlan
    from specgate.serving.server import preflight_spec

    planned = live_plan.server_plan(_settings(profile), "speculative",
                                    reports_dir / "tune" / "live")
    if not isinstance(planned, ServerPlan):
        return planned.message
    spec = planned.spec
    if spec is None or spec.simulated:
        return None
    checked = preflight_spec(spec)
    if checked.status == "rejected":
        return f"{checked.message}; nothing was launched"
    if checked.status == "unavailable" and "No module named 'sglang'" in checked.message:
        where = checked.python or "the launcher's Python"
        return (f"SGLang is not installed for {where}, which the profile's launcher runs "
                f"({checked.message}), so no configuration can be launched; install SGLang "
                "there, or name an interpreter that has it with [server] launcher or "
                "--sglang-launcher")
    return None


def _race(best: bench.Measurement, label: str) -> Callable[[bench.Measurement], str | None]:
    def rule(m: bench.Measurement) -> str | None:
        return bench.straddles(bench.speedup(m, best), 1.0, f"speed-up over {label}")
    return rule


def _baseline(plan: LivePlan, profile: Profile, reports_dir: Path, say: Progress,
              runner: Runner) -> tuple[ConfigRun | None, str, reuse.Stored | None]:
    """A stored baseline when [bench] baseline_max_age_h allows one, else a launched one."""
    max_age, fp, found = plan.baseline_max_age_h, plan.fingerprint, plan.stored
    why = "baseline_max_age_h is not set"
    if max_age is not None:
        if isinstance(found, reuse.Stored):
            try:
                run = ConfigRun.from_json(found.run)
            except (TypeError, KeyError, ValueError) as exc:
                found = (f"the stored baseline {found.path} cannot be read "
                         f"({type(exc).__name__}: {exc})")
            else:
                say(f"baseline: reusing the one measured {found.age_h:.1f} h ago "
                    f"(fingerprint {found.fingerprint})")
                return run, "", found
        why = found or why
    say(f"baseline: launching it ({why})")
    own = plan.with_server(live_plan.server_plan(
        _settings(profile), "baseline", reports_dir / "tune" / "baseline" / "live"))
    run = runner(own, "baseline", progress=say, keep_going=lambda _m: None)
    if max_age is not None and fp is not None and run.measurement is not None \
            and run.failure is None:
        reuse.save(reports_dir, fp, run.to_json())
    return dataclasses.replace(run, reuse={"reused": False, "why": why}), \
        f"measured this run ({why})", None


def run_tune(profile: Profile, reports_dir: Path, *, progress: Progress | None = None,
             use_baseline: bool = True, runner: Runner = run_config) -> TuneResult:
    """Launch the largest chain, predict the rest, race the most promising few."""
    say = progress or (lambda _m: None)
    started = _now()
    t = profile.tune
    cands = tuple(Candidate(s) for s in t.steps)
    tune_dir = reports_dir / "tune"
    tune_dir.mkdir(parents=True, exist_ok=True)
    planned = live_plan.resolve(profile, reports_dir)
    planned = dataclasses.replace(planned, sampling=tune_sampling(planned.sampling, t))

    baseline: ConfigRun | None = None
    baseline_note = "not used (--no-baseline)"
    stored: reuse.Stored | None = None
    if use_baseline:
        baseline, baseline_note, stored = _baseline(planned, profile, reports_dir, say, runner)
    base_m = baseline.measurement if baseline else None
    base_tps = base_m.stat("tps") if base_m else None
    prior = 1000.0 / base_tps.mean if base_tps and base_tps.mean > 0 else None

    trials: list[Trial] = []
    best: Trial | None = None
    stop = ""

    def launch(c: Candidate, predicted: Prediction | None) -> Trial:
        nonlocal best
        index = len(trials) + 1
        chain = planned.with_server(live_plan.server_plan(
            _settings(candidate_profile(profile, c)), "speculative", tune_dir / c.key / "live"))
        rule = (_race(best.measurement, best.candidate.key)
                if best is not None and best.measurement is not None else (lambda _m: None))
        say(f"launch {index}: {c.key}" + (f" (predicted {predicted.tps:.1f} tok/s, tau "
                                           f"{predicted.tau:.3f})" if predicted else ""))
        run = runner(chain, "speculative", progress=say, keep_going=rule)
        m = run.measurement
        if m is None or run.failure is not None or m.stat("tps") is None:
            why = run.failure.text() if run.failure else "no decode tokens were timed"
            return Trial(c, index, predicted, run, "failed", why)
        if best is None or best.measurement is None:
            return Trial(c, index, predicted, run, "best", "first launch")
        ratio = bench.speedup(m, best.measurement)
        verdict = ratio.compare(1.0)
        pct = stats.percent(ratio.confidence)
        text = (f"speed-up over {best.candidate.key} {ratio.mean:.3f}, {pct} % CI "
                f"[{ratio.ci_low:.3f}, {ratio.ci_high:.3f}] after {m.repeats} passes")
        if verdict == "below":
            return Trial(c, index, predicted, run, "dropped",
                         f"confidently slower: {text}", ratio)
        # An interval that only touches 1 (identical timings give [1, 1]) is not faster.
        if verdict == "above" and ratio.ci_low > 1.0:
            return Trial(c, index, predicted, run, "best", f"confidently faster: {text}", ratio)
        return Trial(c, index, predicted, run, "tied", f"not separated: {text}", ratio)

    def record(trial: Trial) -> None:
        nonlocal best
        if trial.status == "best" and best is not None:
            trials[trials.index(best)] = dataclasses.replace(
                best, status="dropped",
                note=f"confidently slower than {trial.candidate.key}")
        if trial.status == "tied" and best is not None and trial.measurement is not None \
                and best.measurement is not None:
            if _tps(trial.measurement) > _tps(best.measurement):
                # the higher mean leads; the two stay marked as not separated
                trials[trials.index(best)] = dataclasses.replace(
                    best, status="tied", note=f"not separated from {trial.candidate.key}")
                trial = dataclasses.replace(trial, status="best",
                                            note=trial.note + " (higher mean)")
        trials.append(trial)
        if trial.status == "best":
            best = trial
        m = trial.measurement
        measured = (f"{_tps(m):.1f} tok/s, accept length {m.stats['accept_len'].mean:.3f}"
                    if m is not None and "accept_len" in m.stats else "not measured")
        say(f"launch {trial.launch}: {trial.candidate.key}: {measured}; {trial.status}: "
            f"{trial.note}")

    acceptance: list[float] = []
    fit: CycleFit | None = None
    preds: dict[str, Prediction] = {}

    def refit() -> None:
        nonlocal acceptance, fit, preds
        measured = [(tr.candidate.steps, tr.measurement) for tr in trials
                    if tr.status != "failed" and tr.measurement is not None]
        if not measured:
            return
        acceptance = conditional_acceptance(measured)
        points = [(s, m.stats["cycle_ms"].mean) for s, m in measured if "cycle_ms" in m.stats]
        if points:
            fit = fit_cycle(points, prior)
            preds = {c.key: predict_one(c, acceptance, fit) for c in cands}

    def race() -> str:
        """Launch the largest chain, then the most promising others; the reason it stopped."""
        record(launch(max(cands), None))
        if best is None:
            return f"{FIRST_FAILED}: " + trials[-1].note
        while True:
            refit()
            tried = {tr.candidate for tr in trials}
            left = [c for c in cands if c not in tried and c.key in preds]
            if not left:
                return "every configuration was measured"
            if len(trials) >= t.max_launches:
                return f"[tune] max_launches = {t.max_launches} reached"
            top = max(left, key=lambda c: preds[c.key].tps)
            assert best is not None
            assert best.measurement is not None
            best_tps = _tps(best.measurement)
            if preds[top.key].tps < best_tps * (1.0 - t.margin):
                return (f"no configuration left is predicted within {t.margin:.0%} of the "
                        f"best measured ({best.candidate.key}, {best_tps:.1f} tok/s); the most "
                        f"promising, {top.key}, is predicted at {preds[top.key].tps:.1f} tok/s")
            record(launch(top, preds[top.key]))

    try:
        stop = race()
    except KeyboardInterrupt:
        # A bounded run (timeout, Ctrl-C) keeps what it measured: the table is written anyway.
        stop = f"interrupted after {len(trials)} launches"
    refit()
    if stored is not None and baseline is not None:
        # The stored baseline is rechecked against a speculative server of this run.
        info = next((tr.run.server_info for tr in trials if tr.run.server_info), {})
        agreed, problems = reuse.recheck(baseline.server_info, info)
        if problems:
            baseline_note = "stored baseline NOT used: " + "; ".join(problems)
            baseline = dataclasses.replace(baseline, measurement=None,
                                           reuse={"reused": False, "why": baseline_note})
        else:
            baseline = dataclasses.replace(
                baseline, reuse=stored.note(profile.bench.baseline_max_age_h or 0.0, agreed))
            baseline_note = "reused: " + str(baseline.reuse["why_safe"])
    confidence = bench.judged_confidence(planned.sampling)
    best_run = best.run if best is not None else None
    result = TuneResult(
        profile=profile.name,
        simulated=planned.simulated or any(tr.run.simulated for tr in trials),
        candidates=cands, trials=tuple(trials), baseline=baseline, baseline_note=baseline_note,
        acceptance=tuple(acceptance), fit=fit, predictions=preds,
        best=best.candidate if best else None, stop_reason=stop or "done",
        confidence=confidence, started_at=started, finished_at=_now(),
        levels=planned.levels, gate_level=planned.gate_level,
        per_level=tuple(level_rows(trials, baseline, planned.levels)),
        against_baseline=against_baseline(best_run, baseline))
    result.write(tune_dir / RESULT_FILE)
    return result


def level_rows(trials: Sequence[Trial], baseline: ConfigRun | None,
               levels: Sequence[int]) -> list[LevelRow]:
    """Every measured chain at every concurrency level, against the baseline at that level."""
    rows = []
    for level in levels:
        base_m = baseline.at(level).measurement if baseline is not None else None
        speedups: dict[str, Summary] = {}
        tps: dict[str, float] = {}
        for tr in trials:
            m = tr.run.at(level).measurement
            if m is None or tr.status == "failed" or m.stat("tps") is None:
                continue
            tps[tr.candidate.key] = _tps(m)
            if base_m is not None and base_m.stat("tps") is not None:
                ratio = bench.speedup(m, base_m)
                if math.isfinite(ratio.mean):
                    speedups[tr.candidate.key] = ratio
        fastest = max(tps, key=lambda k: tps[k]) if tps else None
        rows.append(LevelRow(level, speedups, fastest))
    return rows


def against_baseline(best: ConfigRun | None, baseline: ConfigRun | None) -> Summary | None:
    """The best chain's paired per-prompt speed-up over the baseline at the gate's level (None
    without both measurements, or without a finite figure)."""
    m = best.measurement if best is not None else None
    base = baseline.measurement if baseline is not None else None
    if m is None or base is None:
        return None
    try:
        ratio = bench.speedup(m, base)
    except (ValueError, ZeroDivisionError):
        return None
    return ratio if math.isfinite(ratio.mean) else None


def _tps(m: bench.Measurement) -> float:
    s = m.stat("tps")
    return s.mean if s is not None else math.nan
