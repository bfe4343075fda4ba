"""Baseline reuse: a measured baseline stored with a fingerprint of everything that decides it.

A server launch of a large target costs many minutes, and the baseline (the target alone) does
not change when only the drafter does. A baseline measured by a launch is stored as
REPORTS/baselines/<fingerprint>.json; a later run with `[bench] baseline_max_age_h` set may use
it instead of launching the baseline again when

- the fingerprint, computed from the live plan (measure/plan.py), is the same: the target folder,
  the hashes of its config, tokenizer and generation files (and of the simulator's
  specgate_sim.json where there is one) and of its weight files (size, first and last MiB), the
  SGLang version known before the launch, the baseline launch command without host, port and
  key, GPU model, count and driver, the server's environment ([server] env, secret values
  masked), the prompts as sent (rendered through the chat template), the sampling
  (max_new_tokens, temperature, warmup), the concurrency levels (when not single stream only)
  and the simulator's knobs;
- it is at most `baseline_max_age_h` hours old;
- the speculative server, once running, reports in /server_info the same model_path, version
  and tp_size as the stored baseline's server did (RECHECK_KEYS): the one check that sees the
  far side of a remote launcher.

Anything else means the baseline is measured again; the reason is kept with the run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from specgate.core import files
from specgate.core.redact import redact_urls
from specgate.io import runs
from specgate.io.jsonl import json_safe
from specgate.serving.launch import Config, ServerPlan

if TYPE_CHECKING:
    from specgate.results.bench import Sampling
    from specgate.results.prompts import PromptSet
    from specgate.serving.gpu import GpuFacts
    from specgate.serving.launch import LaunchSpec

STORE_DIR = "baselines"
SCHEMA = 1
RECHECK_KEYS = ("model_path", "version", "tp_size")
# What the server reads besides the weights: the model, how text becomes tokens, the default
# sampling, and the simulator's timing.
_TARGET_FILES = ("config.json", "generation_config.json", "tokenizer_config.json",
                 "tokenizer.json", "specgate_sim.json")
# Launch flags whose values do not change a measurement.
_NOT_FIGURES = ("--host", "--port", "--api-key")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# A weight file is known by its size and its first and last MiB: rewritten weights change them,
# and reading a 1T model's files whole would take longer than the launch it saves.
_WEIGHT_SAMPLE_BYTES = 1 << 20
_SIM_ENV_PREFIX = "SPECGATE_SIM_"
# Where the log goes and which launch speed is drawn: not what is measured.
_SIM_ENV_IGNORED = ("SPECGATE_SIM_TRUTH", "SPECGATE_SIM_LAUNCH_SEED", "SPECGATE_SIM_GPUS")


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    components: dict[str, Any]

    @property
    def id(self) -> str:
        text = json.dumps(self.components, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclasses.dataclass(frozen=True)
class Stored:
    """A stored baseline that passed the fingerprint and age checks (not yet the recheck)."""

    path: Path
    fingerprint: str
    measured_at: str
    age_h: float
    run: dict[str, Any]  # results.ConfigRun.to_json()

    def note(self, max_age_h: float, rechecked: dict[str, Any]) -> dict[str, Any]:
        """What the verdict and perf.baseline_tps say about a baseline that was reused."""
        return {"reused": True, "measured_at": self.measured_at, "age_h": round(self.age_h, 3),
                "max_age_h": max_age_h, "fingerprint": self.fingerprint,
                "store": str(self.path), "rechecked": rechecked,
                "why_safe": (f"same fingerprint {self.fingerprint} (target files and weights, "
                             "SGLang version, baseline launch arguments, GPUs and driver, "
                             "[server] env, prompts as sent and sampling), measured "
                             f"{self.age_h:.1f} h ago (bound {max_age_h:g} h), and "
                             + ("the speculative server's /server_info agrees on "
                                + ", ".join(f"{k} {v!r}" for k, v in rechecked.items())
                                if rechecked else "not rechecked: no speculative server was "
                                "launched"))}


def _file_hash(path: Path) -> str | None:
    try:
        return hashlib.sha256(files.read_bytes(path, limit=files.TOKENIZER_BYTES)
                              ).hexdigest()[:20]
    except OSError:
        return None


def _weights(target: Path | None) -> dict[str, str] | None:
    """Each weight file of the target folder by size and a hash of its first and last MiB."""
    if target is None or not target.is_dir():
        return None
    out: dict[str, str] = {}
    for path in sorted(target.iterdir()):
        if path.suffix not in _WEIGHT_SUFFIXES or not path.is_file():
            continue
        try:
            with files.open_regular(path) as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(0)
                digest = hashlib.sha256(fh.read(_WEIGHT_SAMPLE_BYTES))
                fh.seek(max(size - _WEIGHT_SAMPLE_BYTES, 0))
                digest.update(fh.read(_WEIGHT_SAMPLE_BYTES))
        except OSError as exc:
            out[path.name] = f"unreadable ({exc.strerror})"
            continue
        out[path.name] = f"{size} bytes, sha256 {digest.hexdigest()[:20]}"
    return out


def _launch_args(spec: LaunchSpec) -> list[str]:
    """The baseline command without what does not decide the figures: where it listens and the
    API key's value."""
    out: list[str] = []
    skip = False
    for arg in spec.redacted_argv:
        if skip:
            skip = False
            continue
        if arg.strip("'") in _NOT_FIGURES:
            out.append(f"{arg} …")
            skip = True
            continue
        out.append(arg)
    return out


class Planned(Protocol):
    """What a fingerprint reads of the live plan (measure/plan.py LivePlan, which holds the
    fingerprint it makes)."""

    @property
    def target(self) -> Path | None: ...
    @property
    def prompts(self) -> PromptSet | None: ...
    @property
    def sampling(self) -> Sampling: ...
    @property
    def sglang(self) -> str: ...
    @property
    def simulated(self) -> bool: ...
    @property
    def levels(self) -> tuple[int, ...]: ...
    @property
    def gate_level(self) -> int: ...
    def server(self, config: Config) -> object: ...
    def gpus_of(self, config: Config) -> GpuFacts | None: ...


def fingerprint(plan: Planned, config: Config = "baseline") -> Fingerprint:
    """Everything in the plan that decides a configuration's measurement, as data (hashed into
    the id): the baseline's (what reuse stores under), or the speculative server's, which adds
    the drafter's files and weights.

    Only for a server the plan launches, with its prompts loaded (see plan.resolve).
    """
    planned, prompt_set = plan.server(config), plan.prompts
    if not isinstance(planned, ServerPlan) or planned.spec is None or prompt_set is None:
        raise ValueError(f"a fingerprint needs a launched {config} server and its prompts")
    target = plan.target
    s = plan.sampling
    components: dict[str, Any] = {
        "target": str(target) if target else None,
        "target_files": {name: _file_hash(target / name) if target else None
                         for name in _TARGET_FILES},
        "target_weights": _weights(target),
        "sglang": plan.sglang,
        "launch": _launch_args(planned.spec),
        "gpus": _gpus(plan.gpus_of(config)),
        # A local launcher's [server] env (secrets as ***); a remote one's is in its argv.
        "env": {k: v for k, v in sorted(planned.spec.redacted_env.items())
                if k not in _SIM_ENV_IGNORED},
        "prompts": {"sent_sha256": prompt_set.digest, "count": len(prompt_set.texts)},
        "sampling": {"max_new_tokens": s.max_new_tokens, "temperature": s.temperature,
                     "warmup": s.warmup},
        # The built-in prompt set and the measurement code ship with specgate.
        "specgate": _specgate_version(),
    }
    if plan.levels != (1,):  # a stored baseline must hold every level this run judges
        components["concurrency"] = {"levels": list(plan.levels), "gate": plan.gate_level}
    if plan.simulated:
        components["simulator_env"] = {k: v for k, v in sorted(os.environ.items())
                                       if k.startswith(_SIM_ENV_PREFIX)
                                       and k not in _SIM_ENV_IGNORED}
    if config == "speculative":
        drafter = _drafter_dir(planned.spec)
        components["drafter"] = {
            "path": str(drafter) if drafter else None,
            "files": {name: _file_hash(drafter / name) if drafter else None
                      for name in _TARGET_FILES},
            "weights": _weights(drafter)}
    return Fingerprint(components)


# The server arguments in /server_info that decide an attached server's speed: the model, its
# precision and parallelism, memory and batching, the attention and sampling kernels, CUDA graphs,
# the scheduler, and the speculative chain. Addresses, keys and what each launch draws anew are not
# among them.
ATTACHED_KEYS = (
    "model_path", "dtype", "kv_cache_dtype", "quantization", "load_format", "context_length",
    "tp_size", "dp_size", "pp_size", "ep_size", "enable_dp_attention", "mem_fraction_static",
    "max_running_requests", "max_total_tokens", "max_prefill_tokens", "chunked_prefill_size",
    "page_size", "attention_backend", "decode_attention_backend", "prefill_attention_backend",
    "sampling_backend", "disable_cuda_graph", "cuda_graph_max_bs_decode",
    "disable_radix_cache", "disable_overlap_schedule", "enable_mixed_chunk",
    "enable_torch_compile", "schedule_policy", "schedule_conservativeness", "stream_interval",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_attention_mode",
    "speculative_draft_attention_backend", "speculative_token_map")


def attached_fingerprint(info: Mapping[str, object], gpu_names: Sequence[str]) -> Fingerprint:
    """An attached server's deployment as /server_info reports it, wherever it listens: the
    speed-deciding server arguments (ATTACHED_KEYS), the SGLang version, and the names of its
    GPUs as listed for it (empty where they could not be)."""
    return Fingerprint({
        "attached": {k: info.get(k) for k in ATTACHED_KEYS},
        "sglang": info.get("version"),
        "gpus": sorted(set(gpu_names)),
    })


def _drafter_dir(spec: LaunchSpec) -> Path | None:
    """The drafter folder the speculative command serves, where this machine can read it."""
    found = spec.local_drafter
    return found if found is not None and found.is_dir() else None


def _gpus(facts: GpuFacts | None) -> dict[str, Any] | None:
    if facts is None or facts.unknown:
        return {"unknown": facts.unknown} if facts else None
    out: dict[str, Any] = {"names": list(facts.names), "count": len(facts.names),
                           "driver": list(facts.drivers),
                           "selected": facts.selected if isinstance(facts.selected, str)
                           else list(facts.selected)}
    if facts.clocks:  # known where nvidia-smi reports them: locked clocks change the figures
        out["clocks"] = list(facts.clocks)
    return out


def _specgate_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specgate")
    except PackageNotFoundError:
        return "unknown"


def store_dir(reports_dir: Path) -> Path:
    """REPORTS/baselines, shared by every run (also when given a run's own folder)."""
    return runs.reports_root(reports_dir) / STORE_DIR


def save(reports_dir: Path, fp: Fingerprint, run: dict[str, Any], *,
         now: float | None = None) -> Path:
    """Store a freshly measured baseline run (results.ConfigRun.to_json()) under its fingerprint."""
    when = time.time() if now is None else now
    folder = store_dir(reports_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{fp.id}.json"
    doc = {"schema": SCHEMA, "fingerprint": fp.id, "components": fp.components,
           "measured_unix": when,
           "measured_at": _dt.datetime.fromtimestamp(when, _dt.UTC).isoformat(
               timespec="seconds"),
           "run": run}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(redact_urls(json.dumps(json_safe(doc), indent=1)) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def find(reports_dir: Path, fp: Fingerprint, max_age_h: float, *,
         now: float | None = None) -> Stored | str:
    """The stored baseline for this fingerprint if young enough, else why there is none."""
    path = store_dir(reports_dir) / f"{fp.id}.json"
    if not path.exists():
        others = sorted(p.stem for p in store_dir(reports_dir).glob("*.json")) \
            if store_dir(reports_dir).is_dir() else []
        extra = (f" (stored: {', '.join(others[:3])}{' …' if len(others) > 3 else ''}: "
                 "another target, SGLang, launch, GPU, env or prompt set)") if others else ""
        return f"no stored baseline with fingerprint {fp.id}{extra}"
    try:
        doc = files.read_json(path, limit=files.CONFIG_BYTES)
        measured = float(doc["measured_unix"])
        run = dict(doc["run"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"the stored baseline {path} cannot be read ({exc})"
    if doc.get("schema") != SCHEMA:
        return (f"the stored baseline {path} was written by another specgate (schema "
                f"{doc.get('schema')!r}, this one reads {SCHEMA})")
    if doc.get("components") != json.loads(json.dumps(fp.components, default=str)):
        return f"the stored baseline {path} has other fingerprint components (hash collision?)"
    age_h = ((time.time() if now is None else now) - measured) / 3600.0
    if age_h > max_age_h:
        return (f"the stored baseline is {age_h:.1f} h old, older than baseline_max_age_h = "
                f"{max_age_h:g}")
    if age_h < -0.1:
        return f"the stored baseline is dated {-age_h:.1f} h in the future (clock change?)"
    if run.get("failure") or not run.get("measurement"):
        return "the stored baseline run has no measurement"
    if sampling_greedy(run) and not run.get("answers"):
        return ("the stored baseline kept no evidence of its answers (spec.parity judges the "
                "speculative server's answers by the baseline's own logprobs)")
    return Stored(path=path, fingerprint=fp.id, measured_at=str(doc.get("measured_at", "")),
                  age_h=max(age_h, 0.0), run=run)


def sampling_greedy(run: dict[str, Any]) -> bool:
    """Whether a stored run's measurement answered greedily (temperature 0)."""
    measurement = run.get("measurement")
    return isinstance(measurement, dict) and measurement.get("temperature") == 0


def recheck(stored_info: dict[str, Any], live_info: dict[str, Any]) -> tuple[dict[str, Any],
                                                                             list[str]]:
    """Compare the stored baseline's /server_info with the running speculative server's.

    Returns (the values that agree, one sentence per disagreement). A key neither server reports
    is not compared; a key only one reports is a disagreement.
    """
    agreed: dict[str, Any] = {}
    problems: list[str] = []
    for key in RECHECK_KEYS:
        a, b = stored_info.get(key), live_info.get(key)
        if a is None and b is None:
            continue
        if a != b:
            problems.append(f"/server_info {key}: stored baseline {a!r}, speculative server "
                            f"now {b!r}")
        else:
            agreed[key] = a
    return agreed, problems
