"""The live Phase 0 session: baseline server, then speculative server, measured one at a time."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specgate.core.errors import SpecgateError
from specgate.core.profile import Profile
from specgate.core.redact import MASK, is_secret_name, mask_env, redact_urls
from specgate.io.jsonl import json_safe
from specgate.measure import bench, prompts
from specgate.serving.client import SGLangClient
from specgate.serving.launch import Config

if TYPE_CHECKING:
    from specgate.serving.gpu import GpuProcess
    from specgate.serving.server import ServerHandle

Progress = Callable[[str], None]
CONFIGS: tuple[Config, Config] = ("baseline", "speculative")
RESULTS_FILE = "results.json"
# server_info keys worth keeping beside a measurement (the rest is large and not ours).
_SERVER_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens", "speculative_draft_model_path", "tp_size",
                "model_path", "version", "simulated")


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a stage could not be done: the message and the server's last log lines."""

    stage: str
    message: str
    log_tail: str = ""

    def text(self) -> str:
        out = f"during {self.stage}: {self.message}"
        if self.log_tail and self.log_tail not in self.message:
            out += "\n--- last lines of the server log ---\n" + self.log_tail
        return out


@dataclasses.dataclass(frozen=True)
class GpuCheck:
    """Other processes on the server's GPUs just before a launch."""

    checked: bool
    reason: str
    offenders: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class EnvCheck:
    """The profile's [server] env against the launched process's environment."""

    checked: bool
    reason: str
    expected: dict[str, str] = dataclasses.field(default_factory=dict)
    found: dict[str, str | None] = dataclasses.field(default_factory=dict)

    @property
    def mismatched(self) -> dict[str, str | None]:
        return {k: self.found.get(k) for k, v in self.expected.items() if self.found.get(k) != v}


@dataclasses.dataclass(frozen=True)
class ConfigRun:
    """One server configuration's session: launch (or attach), checks, measurement, stop."""

    config: str
    attached: bool = False
    launch: str = ""
    url: str = ""
    simulated: bool = False
    server_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    gpu: GpuCheck | None = None
    env: EnvCheck | None = None
    measurement: bench.Measurement | None = None
    failure: Failure | None = None
    stop: str = ""
    log_path: str = ""
    # Baseline reuse (measure/reuse.py): {"reused": True, "measured_at", "why_safe", …} for a
    # stored baseline, {"reused": False, "why": …} for a fresh one while reuse is on; {} when off.
    reuse: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["gpu"] = dataclasses.asdict(self.gpu) if self.gpu else None
        out["env"] = dataclasses.asdict(self.env) if self.env else None
        out["measurement"] = self.measurement.to_json() if self.measurement else None
        out["failure"] = dataclasses.asdict(self.failure) if self.failure else None
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConfigRun:
        fields = dict(data)
        if data.get("gpu"):
            gpu = dict(data["gpu"])
            gpu["offenders"] = tuple(gpu.get("offenders", ()))
            fields["gpu"] = GpuCheck(**gpu)
        fields["env"] = EnvCheck(**data["env"]) if data.get("env") else None
        fields["measurement"] = (bench.Measurement.from_json(data["measurement"])
                                 if data.get("measurement") else None)
        fields["failure"] = Failure(**data["failure"]) if data.get("failure") else None
        return cls(**fields)


@dataclasses.dataclass(frozen=True)
class LiveResults:
    """Both configurations of one live session, as written to reports/live/results.json."""

    profile: str
    simulated: bool
    baseline: ConfigRun
    speculative: ConfigRun
    started_at: str = ""
    finished_at: str = ""
    prompts: str = ""

    def run(self, config: str) -> ConfigRun:
        return self.baseline if config == "baseline" else self.speculative

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "profile": self.profile, "simulated": self.simulated,
                "started_at": self.started_at, "finished_at": self.finished_at,
                "prompts": self.prompts, "baseline": self.baseline.to_json(),
                "speculative": self.speculative.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LiveResults:
        return cls(profile=str(data["profile"]), simulated=bool(data["simulated"]),
                   baseline=ConfigRun.from_json(data["baseline"]),
                   speculative=ConfigRun.from_json(data["speculative"]),
                   started_at=str(data.get("started_at", "")),
                   finished_at=str(data.get("finished_at", "")),
                   prompts=str(data.get("prompts", "")))

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        text = json.dumps(json_safe(self.to_json()), indent=1)
        tmp.write_text(redact_urls(text) + "\n", encoding="utf-8")  # no password of a URL
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> LiveResults:
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")))


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def load_prompts(profile: Profile) -> tuple[list[prompts.Prompt], str]:
    """The profile's prompt set, selected by [bench] categories and prompts_per_category."""
    b = profile.bench
    if b.prompts == prompts.BUILTIN:
        chosen, label = prompts.load_builtin(), "builtin"
    else:
        path = profile.resolve(b.prompts)
        assert path is not None
        chosen, label = prompts.load_jsonl(path), str(path)
    return prompts.select(chosen, b.categories, b.prompts_per_category), label


def api_key_of(profile: Profile) -> str | None:
    """The key named by [server] api_key_env (a clear ProfileError when the variable is unset)."""
    from specgate.serving.launch import read_api_key

    return read_api_key(profile.server.api_key_env)


def check_gpus(profile: Profile) -> GpuCheck:
    """Other processes on the GPUs the server will use (skipped without nvidia-smi)."""
    from specgate.serving import gpu
    snap = gpu.snapshot()
    if snap is None:
        return GpuCheck(False, "nvidia-smi is not available on this machine, so GPU processes "
                               "cannot be listed")
    wanted = profile.server.server_gpus()
    if isinstance(wanted, str):
        return GpuCheck(False, f"[server] env CUDA_VISIBLE_DEVICES = {wanted!r} names GPUs "
                               "by id, not by index; set [server] gpus to the indices that "
                               "nvidia-smi lists so they can be checked")
    busy = gpu.busy_on(snap, wanted)
    return GpuCheck(True, f"GPUs {wanted} checked", tuple(_as_dict(p) for p in busy))


def _as_dict(proc: GpuProcess) -> dict[str, Any]:
    return dataclasses.asdict(proc)


def check_env(profile: Profile, handle: ServerHandle) -> EnvCheck:
    """The server process's environment against [server] env (skipped when unreadable)."""
    from specgate.serving import server
    expected = profile.server.server_env()
    reading = server.process_env_detail(handle)
    if reading.env is None:
        return EnvCheck(False, reading.reason, expected)
    found = {k: reading.env.get(k) for k in expected}
    # results.json is a report file: credential values are compared here, then masked.
    for k, want in expected.items():
        if is_secret_name(k) and found[k] is not None:
            found[k] = MASK if found[k] == want else f"{MASK} (a different value)"
    return EnvCheck(True, f"environment {reading.reason}",
                    mask_env(expected), found)


def _keep_going(profile: Profile, config: Config,
                baseline: bench.Measurement | None) -> Callable[[bench.Measurement], str | None]:
    """Another repeat is worth it while an interval a claim is judged on straddles its threshold."""
    th = profile.thresholds

    def rule(m: bench.Measurement) -> str | None:
        if config == "baseline":
            return bench.straddles(m.stat("tps"), th.baseline_tps_min, "baseline tok/s")
        reasons = []
        accept = m.stat("accept_len")
        base_tps = baseline.stat("tps") if baseline else None
        if isinstance(th.accept_len_min, (int, float)):
            reasons.append(bench.straddles(accept, float(th.accept_len_min), "accept length"))
        if baseline is not None and m.stat("tps") and base_tps:
            # spec.breakeven and spec.speedup are one hypothesis on one interval.
            ratio = bench.speedup(m, baseline)
            reasons.append(bench.straddles(ratio, th.speedup_min, "speedup"))
            if th.speedup_min != 1.0:
                reasons.append(bench.straddles(ratio, 1.0, "speedup (break-even)"))
        found = [r for r in reasons if r]
        return "; ".join(found) if found else None

    return rule


def _server_spec(info: dict[str, Any]) -> dict[str, Any]:
    return {k: info[k] for k in _SERVER_KEYS if k in info}


def _start_progress(config: Config, progress: Progress) -> Callable[[float, str], None]:
    """The launcher's progress callback (seconds since start, last log line) as one line."""
    def report(elapsed_s: float, last_line: str) -> None:
        tail = f": {last_line.strip()[:160]}" if last_line.strip() else ""
        progress(f"{config}: starting, {elapsed_s:.0f} s so far{tail}")

    return report


@contextmanager
def _server(profile: Profile, config: Config, log_path: Path,
            progress: Progress) -> Iterator[tuple[ServerHandle, str, bool]]:
    from specgate.serving import launch, server

    url = profile.server.baseline_url if config == "baseline" else profile.server.url
    if url:
        progress(f"{config}: attaching to {url}")
        handle = server.attach(url, api_key_of(profile), config)
        yield handle, f"attached to {url}", True
        return
    spec = launch.build_command(profile, config)
    if not spec.simulated:
        # A flag this SGLang rejects fails here in seconds, not after a 20-minute model load.
        from specgate.core.errors import ServerError
        from specgate.serving.preflight import preflight_spec

        checked = preflight_spec(spec)
        if checked.status == "rejected":
            raise ServerError(f"SGLang {checked.version or ''} rejects the launch command "
                              f"{spec.display()}: {checked.message}")
        if checked.status == "unavailable" and "No module named 'sglang'" in checked.message:
            # The launch would only die with the same import error: say it, don't launch.
            raise ServerError(f"not launched: {checked.message}; install SGLang for this "
                              f"interpreter or set [server] launcher / --sglang-launcher")
        progress(f"{config}: preflight {checked.status}: {checked.message}")
    progress(f"{config}: launching {spec.display()}")
    with server.running(spec, log_path, startup_timeout_s=profile.server.startup_timeout_s,
                        stop_timeout_s=profile.server.stop_timeout_s,
                        on_progress=_start_progress(config, progress)) as handle:
        yield handle, spec.display(), False


def run_config(profile: Profile, config: Config, reports_dir: Path, *,
               baseline: bench.Measurement | None = None,
               progress: Progress | None = None,
               keep_going: Callable[[bench.Measurement], str | None] | None = None
               ) -> ConfigRun:
    """Launch (or attach), check, measure and stop one configuration; errors become data.

    keep_going replaces the gate's rule for more repeats (`specgate tune` races configurations).
    """
    say = progress or (lambda _msg: None)
    fields: dict[str, Any] = {"config": config}
    attached = bool(profile.server.baseline_url if config == "baseline" else profile.server.url)
    fields["attached"] = attached
    if not attached:
        try:
            fields["gpu"] = check_gpus(profile)
        except Exception as exc:  # a broken check must not stop the session
            fields["gpu"] = GpuCheck(False, f"GPU check failed: {exc}")
    handle: ServerHandle | None = None
    log_path = reports_dir / "live" / f"{config}-server.log"
    if not attached:
        fields["log_path"] = str(log_path)
    stage = "prompts"
    try:
        chosen, _label = load_prompts(profile)
        template = prompts.choose_template(profile.bench.chat_template,
                                           profile.resolve(profile.target.path))
        stage = "start"
        with _server(profile, config, log_path, say) as (handle, display, attached):
            fields.update(launch=display, url=handle.url, simulated=bool(handle.simulated),
                          server_info=_server_spec(dict(handle.server_info or {})))
            try:
                fields["env"] = check_env(profile, handle)
            except Exception as exc:  # a broken check must not stop the session
                fields["env"] = EnvCheck(False, f"environment check failed: {exc}",
                                         dict(profile.server.env))
            stage = "measure"
            with SGLangClient(handle.url, handle.api_key,
                              timeout_s=profile.bench.request_timeout_s) as client:
                try:
                    fields["measurement"] = bench.measure(
                        client, profile.bench, config=config,
                        prompts=chosen, template=template,
                        keep_going=keep_going or _keep_going(profile, config, baseline),
                        progress=say,
                        simulated=bool(handle.simulated), server_spec=fields["server_info"])
                except SpecgateError as exc:
                    # Settle first: a server writes its access-log line for the failed request
                    # after answering it, and a dying one needs a moment to exit.
                    alive = _alive(handle, settle_s=1.0)
                    tail = _log_tail_of(exc) or _tail(handle)
                    note = "" if alive is not False else (
                        " (the attached server stopped answering /health)" if handle.attached
                        else " (the server process has exited)")
                    fields["failure"] = Failure("measure", f"{exc}{note}", tail)
            stage = "stop"
            fields["stop"] = _stop(handle)
    except SpecgateError as exc:
        if "failure" not in fields:
            fields["failure"] = Failure(stage, str(exc), _log_tail_of(exc) or _tail(handle))
    except Exception as exc:  # recorded, so every claim can say what broke
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        fields.setdefault("failure", Failure(stage, f"internal error: {detail}",
                                             _tail(handle)))
    fields.setdefault("stop", "attached: left running" if attached else "")
    return ConfigRun(**fields)


def _log_tail_of(exc: SpecgateError) -> str:
    from specgate.core.errors import ServerError

    return exc.log_tail if isinstance(exc, ServerError) else ""


def _stop(handle: ServerHandle) -> str:
    """Stop now (running() would too) so the report of what was left behind is kept."""
    report = handle.stop()
    text = str(report.how)
    if not report.clean:
        text += (f"; left behind: pids {list(report.leftovers)}, port free {report.port_free}, "
                 f"GPU pids {list(report.gpu_leftovers)}")
    if report.notes:
        text += "; " + "; ".join(report.notes)
    return text


def _tail(handle: ServerHandle | None) -> str:
    if handle is None:
        return ""
    try:
        return handle.log_tail()
    except Exception:
        return ""


def _alive(handle: ServerHandle, settle_s: float = 0.0) -> bool | None:
    """Whether the server still runs; settle_s lets a process that just hung up finish dying."""
    deadline = time.monotonic() + settle_s
    try:
        while True:
            alive = bool(handle.alive())
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.1)
    except Exception:
        return None


def run_live(profile: Profile, reports_dir: Path, *,
             progress: Progress | None = None) -> LiveResults:
    """The whole live session, one server at a time; written to reports_dir/live/results.json."""
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
    label = ""
    try:
        label = load_prompts(profile)[1]
    except SpecgateError:
        pass  # reported by run_config as each configuration's failure
    baseline, speculative = _baseline_and_speculative(profile, reports_dir, say)
    results = LiveResults(
        profile=profile.name,
        simulated=profile.is_simulated or baseline.simulated or speculative.simulated,
        baseline=baseline, speculative=speculative, started_at=started,
        finished_at=_now(), prompts=label)
    results.write(live_dir / RESULTS_FILE)
    return results


def _baseline_and_speculative(profile: Profile, reports_dir: Path,
                              say: Progress) -> tuple[ConfigRun, ConfigRun]:
    """Both runs: the baseline first, or a stored one (measure/reuse.py) when the profile allows
    it and the speculative server's /server_info agrees; a fresh launched baseline is stored."""
    from specgate.measure import reuse

    max_age = profile.bench.baseline_max_age_h
    attached = bool(profile.server.baseline_url)
    fp: reuse.Fingerprint | None = None
    why_fresh = ""
    if not attached and max_age is not None:
        try:
            fp = reuse.fingerprint(profile)
        except Exception as exc:  # no fingerprint: measure as always, and store nothing
            why_fresh = f"no fingerprint ({type(exc).__name__}: {exc})"
    found: reuse.Stored | str = why_fresh
    if max_age is not None and fp is not None:
        found = reuse.find(reports_dir, fp, max_age)
    stored: ConfigRun | None = None
    if isinstance(found, reuse.Stored):
        try:
            stored = ConfigRun.from_json(found.run)
            if stored.measurement is not None:
                stored = dataclasses.replace(
                    stored, measurement=bench.restated(stored.measurement, profile.bench))
        except (TypeError, KeyError, ValueError) as exc:
            found = (f"the stored baseline {found.path} cannot be read "
                     f"({type(exc).__name__}: {exc})")
    if isinstance(found, reuse.Stored) and stored is not None:
        say(f"baseline: reusing the one measured {found.age_h:.1f} h ago "
            f"(fingerprint {found.fingerprint}); no baseline launch")
        speculative = run_config(profile, "speculative", reports_dir,
                                 baseline=stored.measurement, progress=say)
        agreed, problems = reuse.recheck(stored.server_info, speculative.server_info)
        if speculative.failure is None and not problems:
            return dataclasses.replace(stored, reuse=found.note(max_age or 0.0, agreed)), \
                speculative
        why_fresh = ("; ".join(problems) if problems else
                     "the speculative server could not be rechecked (it failed)")
        say(f"baseline: measuring it again: {why_fresh}")
        baseline = run_config(profile, "baseline", reports_dir, progress=say)
    else:
        why_fresh = found if isinstance(found, str) else why_fresh
        baseline = run_config(profile, "baseline", reports_dir, progress=say)
        speculative = run_config(profile, "speculative", reports_dir,
                                 baseline=baseline.measurement, progress=say)
    if (max_age is not None and fp is not None and baseline.measurement is not None
            and baseline.failure is None):
        try:
            path = reuse.save(reports_dir, fp, baseline.to_json())
            say(f"baseline: stored as {path.name} for later runs")
        except OSError as exc:
            say(f"baseline: not stored ({exc})")
    if max_age is not None:
        baseline = dataclasses.replace(baseline, reuse={"reused": False, "why": why_fresh})
    return baseline, speculative


RUN_FILE = re.compile(r"^[0-9a-f]{32}\.(json|lock)$")
STALE_AFTER_S = 7 * 24 * 3600


def run_live_once(profile: Profile, reports_dir: Path, uid: str, *,
                  not_before: float = 0.0, progress: Progress | None = None) -> LiveResults:
    """run_live exactly once per run id, however many processes (xdist workers) ask.

    The first caller takes a file lock and launches, measures and stops both servers inside
    it, so no server outlives the locked section; the others wait on the lock and read what it
    wrote to reports_dir/live/<uid>.json. A file written before not_before (a Unix time: when
    the asking process started) is another run's, left by a fixed --testrunuid, and is measured
    again rather than reused.
    """
    from filelock import FileLock

    live_dir = reports_dir / "live"
    live_dir.mkdir(parents=True, exist_ok=True)
    done = live_dir / f"{uid}.json"
    with FileLock(str(live_dir / f"{uid}.lock")):
        if done.exists() and done.stat().st_mtime >= not_before:
            return LiveResults.read(done)
        _remove_stale(live_dir)
        results = run_live(profile, reports_dir, progress=progress)
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


def server_facts(reports_dir: Path, *, since: float = 0.0) -> dict[str, Any]:
    """SGLang version and server URLs of the live session written to reports_dir after `since`
    (a Unix time), for the verdict and the report's environment; {} when there was none."""
    path = reports_dir / "live" / RESULTS_FILE
    try:
        if path.stat().st_mtime < since:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    facts: dict[str, Any] = {}
    for config in ("speculative", "baseline"):
        run = data.get(config) or {}
        info = run.get("server_info") or {}
        if info.get("version") and "sglang_version" not in facts:
            facts["sglang_version"] = str(info["version"])
        measured = run.get("measurement") or {}
        if measured.get("template") and "chat_template" not in facts:
            facts["chat_template"] = {"name": measured["template"],
                                      "source": measured.get("template_source"),
                                      "digest": measured.get("template_digest") or None}
        if run.get("url"):
            facts.setdefault("server_url", run["url"])
            facts[f"{config}_url"] = run["url"]
    reuse = (data.get("baseline") or {}).get("reuse")
    if reuse:
        facts["baseline_reuse"] = reuse
    return facts
