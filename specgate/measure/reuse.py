"""Baseline reuse: a measured baseline stored with a fingerprint of everything that decides it.

A server launch of a large target costs many minutes, and the baseline (the target alone) does
not change when only the drafter does. A baseline measured by a launch is stored as
REPORTS/baselines/<fingerprint>.json; a later run with `[bench] baseline_max_age_h` set may use
it instead of launching the baseline again when

- the fingerprint is the same: target path and the hash of its config.json (and of the
  simulator's specgate_sim.json where there is one), the SGLang version known before the launch,
  the baseline launch command without port and key, GPU model, count and driver (nvidia-smi),
  the server's environment ([server] env, secrets as names only), and what decides the figures
  (prompts, template, sampling, max_new_tokens, simulator knobs);
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
from pathlib import Path
from typing import Any

from specgate.core.profile import Profile
from specgate.core.redact import is_secret_name
from specgate.io.jsonl import json_safe

STORE_DIR = "baselines"
SCHEMA = 1
RECHECK_KEYS = ("model_path", "version", "tp_size")
# tokenizer_config.json holds the chat template the prompts are sent through.
_TARGET_FILES = ("config.json", "tokenizer_config.json", "specgate_sim.json")
_SIM_ENV_PREFIX = "SPECGATE_SIM_"
_SIM_ENV_IGNORED = ("SPECGATE_SIM_TRUTH",)  # where the log goes, not what is measured


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
    run: dict[str, Any]  # live.ConfigRun.to_json()

    def note(self, max_age_h: float, rechecked: dict[str, Any]) -> dict[str, Any]:
        """What the verdict and perf.baseline_tps say about a baseline that was reused."""
        return {"reused": True, "measured_at": self.measured_at, "age_h": round(self.age_h, 3),
                "max_age_h": max_age_h, "fingerprint": self.fingerprint,
                "store": str(self.path), "rechecked": rechecked,
                "why_safe": (f"same fingerprint {self.fingerprint} (target and config.json, "
                             "SGLang version, baseline launch arguments, GPUs and driver, "
                             "[server] env, prompts and sampling), measured "
                             f"{self.age_h:.1f} h ago (bound {max_age_h:g} h), and the "
                             "speculative server's /server_info agrees on "
                             + ", ".join(f"{k} {v!r}" for k, v in rechecked.items()))}


def _file_hash(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:20]
    except OSError:
        return None


def _sglang_version(profile: Profile) -> str:
    """The SGLang version known before a launch: this interpreter's, for a local launcher."""
    if profile.is_simulated:
        from specgate.core.simulated import SGLANG_VERSION

        return f"simulator of {SGLANG_VERSION}"
    argv = profile.launcher_argv()
    import sys

    if argv and argv[0] == sys.executable:
        from importlib import metadata

        try:
            return metadata.version("sglang")
        except metadata.PackageNotFoundError:
            return "not installed here"
    return "unknown before the launch (rechecked against /server_info)"


def _gpu_facts(profile: Profile) -> dict[str, Any]:
    from specgate.serving import gpu

    try:
        snap = gpu.snapshot()
    except Exception as exc:  # a failing nvidia-smi makes the fingerprint say so, not crash
        return {"error": type(exc).__name__}
    if snap is None:
        return {"nvidia_smi": False}
    wanted = profile.server.server_gpus()
    chosen = [g for g in snap.gpus if isinstance(wanted, str) or g.index in wanted]
    return {"names": sorted(g.name for g in chosen), "count": len(chosen),
            "driver": sorted({g.driver_version for g in chosen}),
            "selected": wanted if isinstance(wanted, str) else list(wanted)}


def _launch_args(profile: Profile) -> list[str]:
    """The baseline command without what does not decide the figures (port, API key)."""
    from specgate.serving.launch import build_command

    spec = build_command(profile, "baseline", port=1)
    out: list[str] = []
    skip = False
    for arg in spec.redacted_argv:
        if skip:
            skip = False
            continue
        if arg in ("--port", "--api-key"):
            out.append(f"{arg} …")
            skip = True
            continue
        out.append(arg)
    return out


def fingerprint(profile: Profile) -> Fingerprint:
    """Everything that decides a baseline measurement, as data (hashed into the id)."""
    target = profile.resolve(profile.target.path)
    b = profile.bench
    prompts: str | None = b.prompts
    if b.prompts != "builtin":
        chosen = profile.resolve(b.prompts)
        prompts = f"{chosen} sha256 {_file_hash(chosen) if chosen else None}"
    env = {k: ("(secret)" if is_secret_name(k) else v)
           for k, v in sorted(profile.server.server_env().items())}
    components: dict[str, Any] = {
        "target": str(target) if target else None,
        "target_files": {name: _file_hash(target / name) if target else None
                         for name in _TARGET_FILES},
        "sglang": _sglang_version(profile),
        "launch": _launch_args(profile),
        "gpus": _gpu_facts(profile),
        "env": env,
        "bench": {"prompts": prompts, "categories": b.categories,
                  "prompts_per_category": b.prompts_per_category,
                  "chat_template": b.chat_template, "max_new_tokens": b.max_new_tokens,
                  "temperature": b.temperature, "warmup": b.warmup},
        # The built-in prompt set and the measurement code ship with specgate.
        "specgate": _specgate_version(),
    }
    if profile.is_simulated:
        components["simulator_env"] = {k: v for k, v in sorted(os.environ.items())
                                       if k.startswith(_SIM_ENV_PREFIX)
                                       and k not in _SIM_ENV_IGNORED}
    return Fingerprint(components)


def _specgate_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specgate")
    except PackageNotFoundError:
        return "unknown"


def store_dir(reports_dir: Path) -> Path:
    return reports_dir / STORE_DIR


def save(reports_dir: Path, fp: Fingerprint, run: dict[str, Any], *,
         now: float | None = None) -> Path:
    """Store a freshly measured baseline run (live.ConfigRun.to_json()) under its fingerprint."""
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
    from specgate.core.redact import redact_urls

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
        doc = json.loads(path.read_text(encoding="utf-8"))
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
    return Stored(path=path, fingerprint=fp.id, measured_at=str(doc.get("measured_at", "")),
                  age_h=max(age_h, 0.0), run=run)


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
