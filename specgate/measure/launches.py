"""A live session's launches: the keys they are logged under, their records, and the coverage
(results/drift.py) the session's timed claims are judged with."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from specgate.core import files
from specgate.io import launch_log
from specgate.io.launch_log import LaunchRecord
from specgate.measure import reuse
from specgate.results import drift
from specgate.results.bench import Measurement, Sampling, build_measurement
from specgate.results.deployment import Deployment, Kind
from specgate.results.prompts import ChatTemplate
from specgate.results.stats import Summary, t_quantile
from specgate.serving.launch import Config, ServerPlan

if TYPE_CHECKING:
    from specgate.measure.plan import LivePlan


@dataclasses.dataclass(frozen=True)
class Keys:
    """The fingerprints a session's launches are logged and learned under (None: not logged,
    with why: an attached server whose launch cannot be told from the next, or a plan that
    cannot be fingerprinted)."""

    baseline: str | None
    speculative: str | None
    why: str = ""

    def of(self, config: Config) -> str | None:
        return self.baseline if config == "baseline" else self.speculative


def keys(plan: LivePlan, attached: Mapping[Config, Mapping[str, str]] | None = None) -> Keys:
    """The fingerprints of the plan's servers: a launched baseline's is the reuse one; an
    attached server's is its deployment as attached (its `attached_launch`, made from its
    /server_info and GPUs by attached_launch), where its launch has an identity."""
    found: dict[str, str | None] = {}
    why: list[str] = []
    for config in ("baseline", "speculative"):
        planned = plan.server(config)
        facts = (attached or {}).get(config)
        if isinstance(planned, ServerPlan) and planned.spec is None and facts is not None:
            found[config] = facts.get("fingerprint") if facts.get("identity") else None
            if found[config] is None:
                why.append(f"the attached {config} server's launches are not logged: "
                           f"{facts.get('why') or 'it gave no /server_info'}")
            continue
        if not isinstance(planned, ServerPlan) or planned.spec is None or plan.prompts is None:
            found[config] = None
            why.append(f"the {config} server is not launched here")
            continue
        if config == "baseline" and plan.fingerprint is not None:
            found[config] = plan.fingerprint.id
            continue
        try:
            found[config] = reuse.fingerprint(plan, config).id
        except Exception as exc:  # no key: launches are not logged, the prior stays
            found[config] = None
            why.append(f"no fingerprint of the {config} server ({type(exc).__name__}: {exc})")
    return Keys(found["baseline"], found["speculative"], "; ".join(why))


def _durations(value: object, path: str = "") -> dict[str, float]:
    """Every number of a (nested) startup_time dict, by its dotted path."""
    if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
        return {}
    if not isinstance(value, dict):
        return {path: float(value)} if path else {}
    out: dict[str, float] = {}
    for key, inner in value.items():
        out.update(_durations(inner, f"{path}.{key}" if path else str(key)))
    return out


def _startup_available(info: Mapping[str, object]) -> object:
    """internal_states[0].memory_usage.startup_available: the GPU memory free at the start."""
    states = info.get("internal_states")
    first = states[0] if isinstance(states, list) and states else None
    usage = first.get("memory_usage") if isinstance(first, dict) else None
    return usage.get("startup_available") if isinstance(usage, dict) else None


def launch_identity(info: Mapping[str, object]) -> tuple[str, str]:
    """(the identity of the launch an attached server is, ""), or ("", why there is none),
    from its /server_info: SGLang draws random_seed at each launch (unless --random-seed fixes
    it) and times its start anew (startup_time: loading the weights, allocating the KV cache,
    the scheduler; with the GPU memory free at the start, memory_usage.startup_available). The
    same running server gives the same identity however often it is measured."""
    seed = info.get("random_seed")
    durations = _durations(info.get("startup_time"))
    missing = [name for name, ok in (
        ("random_seed", isinstance(seed, int) and not isinstance(seed, bool)),
        ("startup_time durations", bool(durations))) if not ok]
    if missing:
        return "", (f"its /server_info gives no {' and no '.join(missing)} to tell one launch "
                    "from the next")
    text = json.dumps({"random_seed": seed, "startup_time": durations,
                       "startup_available": _startup_available(info)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20], ""


def attached_launch(info: Mapping[str, object], gpu_names: tuple[str, ...]) -> dict[str, str]:
    """What an attached server's launch is logged by: {"fingerprint", "identity"} (the
    deployment as attached, measure/reuse.py attached_fingerprint, and launch_identity), or
    {"why"} when the launch has no identity."""
    identity, why = launch_identity(info)
    if not identity:
        return {"why": why}
    return {"fingerprint": reuse.attached_fingerprint(info, gpu_names).id, "identity": identity}


def _log_figure(summary: Summary | None) -> tuple[float, float] | None:
    """(ln value, its standard error within the launch) of a figure with an interval."""
    if summary is None or not math.isfinite(summary.mean) or summary.mean <= 0:
        return None
    se = math.nan
    if summary.has_interval and summary.ci_low > 0:
        q = t_quantile(0.5 + summary.confidence / 2.0, summary.df)
        se = math.log(summary.ci_high / summary.ci_low) / (2.0 * q)
    return math.log(summary.mean), se if math.isfinite(se) else 0.0


def entry(keys_: Keys, config: Config, measurement: Measurement, *, design: drift.Design,
          run: str, when: str | None = None, launch: str = "") -> LaunchRecord | None:
    """One launch's record: its figure (the baseline's tok/s, the speculative server's cycle),
    and an attached server's launch identity; None when it has no key or no figure."""
    key = keys_.of(config)
    figure = _log_figure(measurement.stat(drift.FIGURE[config]))
    if key is None or figure is None:
        return None
    return LaunchRecord(
        fingerprint=key, deployment=keys_.baseline or "", config=config,
        time=when or _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        design=design, run=run, figures={drift.FIGURE[config]: figure}, launch=launch)


def record(reports_dir: Path, keys_: Keys, config: Config, measurement: Measurement, *,
           design: drift.Design, run: str, launch: str = "") -> LaunchRecord | None:
    """Log one launch (see entry) in REPORTS/history/launches.jsonl."""
    found = entry(keys_, config, measurement, design=design, run=run, launch=launch)
    if found is not None:
        launch_log.append(launch_log.log_file(reports_dir), found)
    return found


def bracketed(first: Measurement, again: Measurement, sampling: Sampling,
              template: ChatTemplate) -> Measurement:
    """An A–B–A baseline: both launches' requests pooled per prompt (the second's passes
    numbered after the first's), so every figure and interval spans the two launches."""
    samples = [*first.samples, *(dataclasses.replace(s, repeat=s.repeat + first.repeats)
                                 for s in again.samples)]
    return build_measurement(
        config="baseline", url=first.url, template=template, sampling=sampling,
        samples=samples, simulated=first.simulated, server_spec=first.server_spec,
        stop_reason=f"{first.repeats} + {again.repeats} repeats over two launches, before and "
                    "after the speculative server (design aba)",
        concurrency=first.concurrency, fillers=first.fillers + again.fillers)


def history(reports_dir: Path, keys_: Keys) -> list[LaunchRecord]:
    """The logged launches, with the stored baseline of this fingerprint (measure/reuse.py)
    counted as a launch where the log does not hold it (stored before the log was kept)."""
    records = launch_log.read(launch_log.log_file(reports_dir))
    stored = _stored_launch(reports_dir, keys_.baseline)
    if stored is not None and not any(
            r.fingerprint == stored.fingerprint and r.time == stored.time for r in records):
        records.insert(0, stored)
    return records


def _stored_launch(reports_dir: Path, key: str | None) -> LaunchRecord | None:
    if key is None:
        return None
    path = reuse.store_dir(reports_dir) / f"{key}.json"
    try:
        doc = files.read_json(path, limit=files.CONFIG_BYTES)
        stats = doc["run"]["measurement"]["stats"]["tps"]
        summary = Summary.from_json(stats)
        when = str(doc["measured_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    figure = _log_figure(summary)
    if figure is None:
        return None
    return LaunchRecord(fingerprint=key, deployment=key, config="baseline", time=when,
                        figures={"tps": figure})


def coverage(settings: drift.Settings, records: list[LaunchRecord], keys_: Keys, *,
             baseline_launches: int = 1, bracket: drift.Bracket | None = None,
             note: str = "", deployment: Deployment | None = None) -> drift.Coverage:
    """The launch part of this run's intervals: the profile's spread, else each server's
    learned from the logged launches (the prior of the deployment's class until there are
    enough; the host-bound one while it is not classified)."""
    kind: Kind = deployment.kind if deployment is not None else "unknown"
    spreads: dict[str, drift.Spread] = {}
    configs: tuple[Config, Config] = ("baseline", "speculative")
    for config in configs:
        figure = drift.FIGURE[config]
        if settings.spread is not None:
            spreads[config] = drift.fixed(figure, settings.spread)
        else:
            spreads[config] = drift.learn(records, config=config,
                                          fingerprint=keys_.of(config),
                                          deployment=keys_.baseline,
                                          min_launches=settings.min_launches, kind=kind,
                                          gpu=deployment.gpu if deployment is not None else "")
    return drift.Coverage(settings.design, spreads["baseline"], spreads["speculative"],
                          baseline_launches=baseline_launches, bracket=bracket, note=note,
                          deployment=deployment)
