"""The live Phase 0 session: baseline server, then speculative server, each at every concurrency
level of the plan, in the order the plan's design asks; written to live/results.json."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import time
import uuid
from collections.abc import Callable, Collection
from pathlib import Path

from filelock import FileLock

from specgate.core.errors import SpecgateError
from specgate.core.profile import Profile
from specgate.core.redact import redact_urls
from specgate.measure import launches, resident, reuse
from specgate.measure import plan as live_plan
from specgate.measure.plan import Blocked, LivePlan
from specgate.measure.server_session import Progress, run_config
from specgate.results import bench, deployment, drift
from specgate.results.live import RESULTS_FILE, ConfigRun, Failure, LiveResults
from specgate.serving import server
from specgate.serving.launch import Config, ServerPlan


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")



def run_live(profile: Profile, reports_dir: Path, *,
             progress: Progress | None = None,
             levels: Collection[int] | None = None) -> LiveResults:
    """The whole live session, one server at a time; written to reports_dir/live/results.json.

    The profile is resolved once into a LivePlan; attached servers are checked before anything
    is launched, so a wrong --server-url costs seconds, not a baseline launch. levels: the
    [bench] concurrency levels to measure besides the gate's (None: all of them).
    """
    live_dir = reports_dir / "live"
    live_dir.mkdir(parents=True, exist_ok=True)
    log_file = live_dir / "progress.log"

    def say(message: str) -> None:
        message = redact_urls(message)
        line = f"{_now()} {message}"
        with open(log_file, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        if progress is not None:
            progress(message)

    started = _now()
    planned = live_plan.resolve(profile, reports_dir, levels=levels)
    keys = launches.keys(planned)
    settings = planned.launches
    # The coverage known before this run's launches: what the rule for more passes judges on.
    before = launches.coverage(settings, launches.history(reports_dir, keys), keys,
                               baseline_launches=2 if settings.design == "aba" else 1)
    unusable = _unusable_attached(planned, say)
    after: ConfigRun | None = None

    def classed(baseline: ConfigRun) -> drift.Coverage:
        """The coverage before this run, with the deployment's class read from the baseline
        (as measured so far, or whole): the baseline's rule for more passes and the
        speculative server's passes judge on its prior, as the claims will."""
        found = classify(planned, baseline)
        if found.kind == "unknown":
            return before
        return launches.coverage(settings, launches.history(reports_dir, keys), keys,
                                 baseline_launches=2 if settings.design == "aba" else 1,
                                 deployment=found)

    if unusable:
        baseline, speculative = (_not_run(planned, c, unusable) for c in live_plan.CONFIGS)
    elif settings.design == "interleaved" or _launched_together(planned):
        baseline, speculative = resident.run_pair(
            planned, say, before, together=planned.parallel_launch,
            interleaved=settings.design == "interleaved", classed=classed)
        if settings.design != "interleaved":
            baseline = _stored(planned, reports_dir, baseline, say,
                               planned.stored if isinstance(planned.stored, str) else "")
        if settings.design == "aba":
            after = _baseline_again(planned, baseline, speculative, say, before)
    else:
        baseline, speculative = _baseline_and_speculative(planned, reports_dir, say, before,
                                                          classed)
        if settings.design == "aba":
            after = _baseline_again(planned, baseline, speculative, say, before)
    baseline, coverage = _covered(planned, reports_dir, keys, baseline, speculative, after, say)
    results = LiveResults(
        profile=planned.name,
        simulated=planned.simulated or baseline.simulated or speculative.simulated,
        baseline=baseline, speculative=speculative, started_at=started,
        finished_at=_now(), prompts=planned.prompts.label if planned.prompts else "",
        gpus=dataclasses.asdict(planned.gpus) if planned.gpus else None,
        coverage=coverage, baseline_after=after,
        gpus_by_server={c: dataclasses.asdict(f) for c, f in planned.gpu_facts.items()}
        or None, gpu_differences=planned.gpu_differences)
    results.write(live_dir / RESULTS_FILE)
    return results


def _baseline_again(plan: LivePlan, first: ConfigRun, speculative: ConfigRun, say: Progress,
                    coverage: drift.Coverage) -> ConfigRun | None:
    """A–B–A: the baseline launched again after the speculative server, measured with as many
    passes as its first launch; None when there is nothing to bracket (either run failed)."""
    if first.measurement is None or speculative.measurement is None:
        say("baseline: not launched again (design aba): "
            + ("the speculative run failed" if speculative.measurement is None
               else "the first baseline run failed"))
        return None
    passes = first.measurement.repeats
    say(f"baseline: launching again after the speculative server (design aba), {passes} passes")
    return run_config(plan, "baseline", progress=say,
                      keep_going=lambda m: (f"{m.repeats} of the first launch's {passes} passes"
                                            if m.repeats < passes else None))


def _covered(plan: LivePlan, reports_dir: Path, keys: launches.Keys, baseline: ConfigRun,
             speculative: ConfigRun, after: ConfigRun | None,
             say: Progress) -> tuple[ConfigRun, drift.Coverage]:
    """Log this run's launches, pool an A–B–A baseline's two launches, and learn the
    coverage the timed claims are judged with (this run's launches included)."""
    settings = plan.launches
    run = uuid.uuid4().hex[:16]
    runs: list[tuple[Config, ConfigRun | None]] = [
        ("baseline", baseline), ("speculative", speculative), ("baseline", after)]
    attached: dict[Config, dict[str, str]] = {
        c: r.attached_launch for c, r in runs if r is not None and r.attached and r.attached_launch}
    if attached:  # an attached server's key is known once its /server_info was read
        keys = launches.keys(plan, attached)
    # One record per launch: an attached server measured again is the launch it was.
    logged: set[tuple[str | None, str]] = {
        (r.fingerprint, r.launch) for r in launches.history(reports_dir, keys) if r.launch}
    for config, r in runs:
        if r is None or r.measurement is None or r.failure is not None \
                or r.reuse.get("reused"):
            continue
        launch = r.attached_launch.get("identity", "") if r.attached else ""
        if r.attached and not launch:
            continue
        if launch and (keys.of(config), launch) in logged:
            say(f"{config}: the attached server is a launch already logged (its /server_info "
                "gives the same random_seed and startup_time): not a new launch")
            continue
        try:
            launches.record(reports_dir, keys, config, r.measurement, design=settings.design,
                            run=run, launch=launch)
            logged.add((keys.of(config), launch))
        except OSError as exc:
            say(f"{config}: launch not logged ({exc})")
    note, bracket, pooled = "", None, 1
    first, again = baseline.measurement, after.measurement if after else None
    if settings.design == "aba" and after is not None and first and again \
            and after.failure is None and plan.prompts is not None:
        bracket = drift.Bracket(first.stats["tps"].mean, again.stats["tps"].mean) \
            if "tps" in first.stats and "tps" in again.stats else None
        template = plan.prompts.template
        baseline = dataclasses.replace(
            baseline, measurement=launches.bracketed(first, again, plan.sampling, template),
            levels={n: launches.bracketed(m, after.levels[n], plan.sampling, template)
                    if n in after.levels else m for n, m in baseline.levels.items()})
        pooled = 2
    elif settings.design == "aba":
        why = (after.failure.text() if after is not None and after.failure is not None
               else "it was not launched")
        note = f"the baseline's second launch gave no measurement ({why}): one launch pooled"
    unlogged = [f"the attached {r.config} server's launches are not logged "
                f"({r.attached_launch['why']})" for r in (baseline, speculative)
                if r.attached and "why" in r.attached_launch]
    note = "; ".join([*([note] if note else []), *unlogged])
    found = classify(plan, baseline)
    say(f"deployment: {found.line()}")
    coverage = launches.coverage(settings, launches.history(reports_dir, keys), keys,
                                 baseline_launches=pooled, bracket=bracket, note=note,
                                 deployment=found)
    return baseline, coverage


def classify(plan: LivePlan, baseline: ConfigRun) -> deployment.Deployment:
    """The deployment's class from the baseline as measured (results/deployment.py): its
    single-stream decode tok/s, its GPUs' name from the snapshot its GPU check took (an
    attached server's from the listing through the launcher prefix, or on this machine for a
    loopback address), and the bytes a step of the target reads per GPU. Unknown, with why,
    whatever is missing (a baseline that failed among them): its claims then take the
    host-bound prior."""
    if plan.simulated or baseline.simulated:
        return deployment.unknown("no GPU name (simulated server)")
    single = baseline.at(1)
    measured = single.measurement
    stat = measured.stat("tps") if measured is not None else None
    if stat is None or single.failure is not None or measured is None:
        # A failure at any stage makes the baseline's claims broken: its figure is not used.
        why = (f"failed during {single.failure.stage}: {single.failure.message}"
               if single.failure is not None else "no decode tokens timed")
        return deployment.unknown(f"the baseline gave no single-stream tok/s ({why})")
    if measured.bursts * 2 >= len(measured.samples):
        return deployment.unknown("the baseline's streams arrived in bursts, so its tok/s is "
                                  "not the server's")
    check = baseline.gpu
    if check is None or not check.names:
        why = check.reason if check is not None else "no GPU check was made"
        return deployment.unknown(f"no GPU name ({why})")
    planned = plan.server("baseline")
    tp_info = baseline.server_info.get("tp_size")
    tp = tp_info if isinstance(tp_info, int) and tp_info > 0 else (
        planned.tp if isinstance(planned, ServerPlan) else 1)
    step: deployment.StepBytes | str
    if plan.target is None:
        step = "the target folder is not on this machine"
    else:
        try:
            step = deployment.step_bytes(plan.target, tp)
        except SpecgateError as exc:
            step = str(exc)
    return deployment.classify(tps=stat.mean, gpu_names=check.names, step=step)


def _unusable_attached(plan: LivePlan, say: Progress) -> dict[str, str]:
    """Each attached server that cannot be measured (unreachable, no /server_info, the wrong
    configuration), found before anything is launched."""
    found: dict[str, str] = {}
    for planned in (plan.baseline, plan.speculative):
        config = planned.config
        if isinstance(planned, Blocked) or planned.spec is not None:
            continue
        say(f"{config}: checking the attached server at {planned.url}")
        try:
            server.attach(planned.url, planned.api_key, config)
        except SpecgateError as exc:
            found[config] = str(exc)
            say(f"{config}: {exc}")
    return found


def _not_run(plan: LivePlan, config: Config, unusable: dict[str, str]) -> ConfigRun:
    """The run of a configuration left out because an attached server cannot be measured."""
    planned = plan.server(config)
    attached = isinstance(planned, ServerPlan) and planned.spec is None
    if config in unusable:
        message = unusable[config]
    else:
        other = next(iter(unusable))
        message = (f"not {'measured' if attached else 'launched'}: the {other} server cannot "
                   f"be used, and one configuration alone gives no verdict: {unusable[other]}")
    return ConfigRun(config=config, attached=attached, gate_level=plan.gate_level,
                     url=planned.url if isinstance(planned, ServerPlan) and attached else "",
                     failure=Failure("start", message),
                     stop="attached: left running" if attached else "")


def _baseline_and_speculative(plan: LivePlan, reports_dir: Path, say: Progress,
                              coverage: drift.Coverage | None = None,
                              classed: Callable[[ConfigRun], drift.Coverage] | None = None
                              ) -> tuple[ConfigRun, ConfigRun]:
    """Both runs: the baseline first, or a stored one (measure/reuse.py) when the plan allows it
    and the speculative server's /server_info agrees; a fresh launched baseline is stored.
    `classed` gives the coverage of the class the baseline puts the deployment in: the
    baseline's rule for more passes judges on it as it measures, and the speculative server's
    passes once the baseline is measured."""
    max_age, found = plan.baseline_max_age_h, plan.stored
    stored: ConfigRun | None = None
    if isinstance(found, reuse.Stored):
        try:
            stored = ConfigRun.from_json(found.run)
            if stored.measurement is not None:
                stored = dataclasses.replace(
                    stored, measurement=bench.restated(stored.measurement, plan.sampling))
            stored = dataclasses.replace(stored, levels={
                n: bench.restated(m, plan.sampling) for n, m in stored.levels.items()})
        except (TypeError, KeyError, ValueError) as exc:
            found = (f"the stored baseline {found.path} cannot be read "
                     f"({type(exc).__name__}: {exc})")
    if isinstance(found, reuse.Stored) and stored is not None:
        say(f"baseline: reusing the one measured {found.age_h:.1f} h ago "
            f"(fingerprint {found.fingerprint}); no baseline launch")
        speculative = run_config(plan, "speculative", baseline=stored, progress=say,
                                 coverage=classed(stored) if classed else coverage)
        if isinstance(plan.speculative, Blocked):
            # Nothing was launched to recheck it against, and a fresh baseline would be a whole
            # target load for a verdict the blocked server already decides.
            return dataclasses.replace(stored, reuse=found.note(max_age or 0.0, {})), speculative
        agreed, problems = reuse.recheck(stored.server_info, speculative.server_info)
        if speculative.failure is None and not problems:
            return dataclasses.replace(stored, reuse=found.note(max_age or 0.0, agreed)), \
                speculative
        failed = speculative.failure
        why_fresh = (f"the speculative server could not be rechecked (it failed during "
                     f"{failed.stage}: {failed.message})" if failed is not None
                     else "; ".join(problems))
        say(f"baseline: measuring it again: {why_fresh}")
        baseline = run_config(plan, "baseline", progress=say, coverage=coverage,
                              classed=classed)
    else:
        why_fresh = found if isinstance(found, str) else ""
        baseline = run_config(plan, "baseline", progress=say, coverage=coverage,
                              classed=classed)
        speculative = run_config(plan, "speculative", baseline=baseline, progress=say,
                                 coverage=classed(baseline) if classed else coverage)
    return _stored(plan, reports_dir, baseline, say, why_fresh), speculative


def _launched_together(plan: LivePlan) -> bool:
    """[server] parallel_launch with both servers launched here (a stored baseline that may
    stand in for the launch takes the usual path: then there is one launch only)."""
    launched = all(isinstance(p, ServerPlan) and p.spec is not None
                   for p in (plan.baseline, plan.speculative))
    return plan.parallel_launch and launched and not isinstance(plan.stored, reuse.Stored)


def _stored(plan: LivePlan, reports_dir: Path, baseline: ConfigRun, say: Progress,
            why_fresh: str) -> ConfigRun:
    """A freshly measured baseline, stored for later runs when reuse is on, and saying why it
    was measured rather than reused."""
    max_age, fp = plan.baseline_max_age_h, plan.fingerprint
    if (max_age is not None and fp is not None and baseline.measurement is not None
            and baseline.failure is None):
        try:
            path = reuse.save(reports_dir, fp, baseline.to_json())
            say(f"baseline: stored as {path.name} for later runs")
        except OSError as exc:
            say(f"baseline: not stored ({exc})")
    if max_age is not None:
        baseline = dataclasses.replace(baseline, reuse={"reused": False, "why": why_fresh})
    return baseline


RUN_FILE = re.compile(r"^[0-9a-f]{32}\.(json|lock)$")
STALE_AFTER_S = 7 * 24 * 3600


def run_live_once(profile: Profile, reports_dir: Path, uid: str, *,
                  not_before: float = 0.0, progress: Progress | None = None,
                  levels: Collection[int] | None = None) -> LiveResults:
    """run_live exactly once per run id, however many processes (xdist workers) ask.

    The first caller takes a file lock and launches, measures and stops both servers inside
    it, so no server outlives the locked section; the others wait on the lock and read what it
    wrote to reports_dir/live/<uid>.json. A file written before not_before (a Unix time: when
    the asking process started) is another run's, left by a fixed --testrunuid, and is measured
    again rather than reused.
    """
    live_dir = reports_dir / "live"
    live_dir.mkdir(parents=True, exist_ok=True)
    done = live_dir / f"{uid}.json"
    with FileLock(str(live_dir / f"{uid}.lock")):
        if done.exists() and done.stat().st_mtime >= not_before:
            return LiveResults.read(done)
        _remove_stale(live_dir)
        results = run_live(profile, reports_dir, progress=progress, levels=levels)
        results.write(done)
        return results


def _remove_stale(live_dir: Path) -> None:
    """Per-run files of runs long gone (a run in progress keeps its files fresh)."""
    cutoff = time.time() - STALE_AFTER_S
    for path in live_dir.iterdir():
        try:
            if RUN_FILE.match(path.name) and path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:
            pass

