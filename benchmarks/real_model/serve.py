"""The probes and servers benchmarks/real_model/earn.py runs on real SGLang: `pytest -m probe`
with its verdict kept, one server started from a profile, and the probe's accept-length
measurement of a running speculative server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.real_model import profiles

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

OPTIONS = profiles.OPTIONS


def log(msg: str) -> None:
    print(f"[serve {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pytest_probe(work: Path, prof: Path, name: str, extra: list[str],
                 timeout_s: float, reports: Path | None = None) -> dict[str, Any]:
    """One `pytest -m probe`; its verdict, live results and log copied to WORK/out/NAME. With
    `reports`, the run writes there, beside earlier runs' history (regress.* compare with them);
    else into a fresh WORK/reports/NAME."""
    if reports is None:
        reports = work / "reports" / name
        shutil.rmtree(reports, ignore_errors=True)
    out = work / "out" / name
    out.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    with (out / "pytest.log").open("w") as fh:
        try:
            code = subprocess.run([sys.executable, "-m", "pytest", "-m", "probe",
                                   f"{OPTIONS['profile']}={prof}",
                                   f"{OPTIONS['reports']}={reports}", "-p", "no:cacheprovider",
                                   *extra], stdout=fh, stderr=subprocess.STDOUT, cwd=work,
                                  timeout=timeout_s, check=False).returncode
        except subprocess.TimeoutExpired:
            code = 124
    took = time.monotonic() - t
    for item in ("verdict.json", "live"):
        src = reports / item
        if src.is_dir():
            shutil.copytree(src, out / item, dirs_exist_ok=True)
        elif src.exists():
            shutil.copy(src, out / item)
    shutil.copy(prof, out / "profile.toml")
    doc = json.loads((reports / "verdict.json").read_text()) \
        if (reports / "verdict.json").exists() else {}
    claims = [{k: c.get(k) for k in ("id", "status", "observed", "expected", "message")}
              for c in doc.get("claims", [])]
    log(f"{name}: exit {code}, verdict {doc.get('outcome')} in {took:.0f} s")
    for c in claims:
        if c["id"].startswith(("spec.", "perf.", "eval.")):
            log(f"  {c['id']}: {c['status']} — {str(c['message'])[:240]}")
    return {"exit": code, "seconds": round(took, 1), "outcome": doc.get("outcome"),
            "claims": claims}


def start(profile: Any, config: str, log_path: Path, port: int | None = None
          ) -> tuple[Any, float]:
    from specgate.serving import launch, server

    spec = launch.build_command(profile, config, port=port)
    t = time.monotonic()
    handle = server.launch(spec, log_path, startup_timeout_s=profile.server.startup_timeout_s)
    return handle, time.monotonic() - t


def accept_length(url: str, profile: Any) -> dict[str, Any]:
    """The probe's measurement of a speculative server: accept length overall and per
    category (Σ completion tokens / Σ verify passes)."""
    from specgate.measure import passes
    from specgate.results import prompts
    from specgate.results.bench import Sampling
    from specgate.serving.client import SGLangClient

    section = profile.bench.model_copy(update={"repeats": 1, "max_repeats": 1})
    chosen = prompts.load_for(section, source=None, target=profile.target_path)
    with SGLangClient(url, None, timeout_s=section.request_timeout_s) as client:
        m = passes.measure(client, Sampling.of(section), chosen, config="speculative")
    acc, tps = m.stat("accept_len"), m.stat("tps")
    return {"accept_len": None if acc is None else round(acc.mean, 4),
            "accept_len_ci": None if acc is None else [round(acc.ci_low, 4),
                                                       round(acc.ci_high, 4)],
            "tps_while_others_ran": None if tps is None else round(tps.mean, 1),
            "per_category": {k: round(v, 4) for k, v in m.per_category_accept_len.items()},
            "requests": len(m.samples),
            "completion_tokens": sum(s.completion_tokens for s in m.samples),
            "verify_ct": sum(s.spec_verify_ct or 0 for s in m.samples)}
