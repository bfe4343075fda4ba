"""The live half on real SGLang: two probes of the trained drafter, the borrowed drafter's accept
length before and after remap, and baseline launches for the launch-to-launch variance.

After build.py, on the same GPU machine:

    python3 -m benchmarks.real_model.serve --work WORK --target TARGET [--steps 3]

1. probe-trained-1: `pytest -m probe`, specgate launching the baseline, then the speculative
   server (the GPU holds nothing else).
2. Then, all at once: three baseline servers and four speculative ones (trained; borrowed with
   its own map; borrowed remapped to the trained map; borrowed with the trained map copied in
   unchanged). Each baseline is measured by variance.py's workload while the others sit idle.
3. probe-trained-2: `pytest -m probe` attached to the trained speculative server and the first
   of those baselines (--server-url / --baseline-url).
4. The borrowed servers' accept length on the probe's 42 prompts (the probe's measurement,
   three servers at once: accept length does not depend on speed).
5. Everything but the first baseline stops; that baseline is measured again, alone.
WORK/serve.json and WORK/out/serve/ hold the figures.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.real_model import (
    profiles,
    variance,
)
from benchmarks.servers import free_ports

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

OPTIONS = profiles.OPTIONS
BORROWED = ("borrowed", "borrowed-remapped", "borrowed-mismatched")
RESIDENT_BASELINES = 3


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--launcher", default="python3 -m sglang.launch_server")
    ap.add_argument("--sim", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--skip-probe1", action="store_true")
    ap.add_argument("--probe-timeout", type=float, default=420.0)
    ap.add_argument("--deadline", type=float, help="Unix time: later stages are skipped, in "
                    "the order probe 2, borrowed, variance, when too little time is left")
    args = ap.parse_args(argv)

    def left() -> float:
        return float("inf") if args.deadline is None else args.deadline - time.time()

    from specgate.serving import safety_net

    safety_net.install_signal_handlers()
    work, d = args.work, args.work / "drafters"
    launcher = shlex.split(args.launcher)
    record: dict[str, Any] = {"steps": args.steps, "seconds": {}}
    path = work / "serve.json"

    def save() -> None:
        path.write_text(json.dumps(record, indent=1, default=str) + "\n")

    t0 = time.monotonic()
    pdir = work / "profiles"
    probe_doc = profiles.probe(args.target, d / "trained", work / "dumps" / "heldout", launcher,
                               args.sim, args.steps)
    probe_toml = profiles.write(probe_doc, pdir / "probe-trained.toml")
    probe_prof = profiles.load(probe_doc, pdir / "probe-trained.toml")
    if not args.skip_probe1 and left() > 200:
        record["probe-trained-1"] = pytest_probe(work, probe_toml, "probe-trained-1", [],
                                                 args.probe_timeout)
        record["seconds"]["probe-trained-1"] = round(time.monotonic() - t0, 1)
        save()

    # 2. everything at once
    if left() < 240:
        record["skipped"] = f"only {left():.0f} s left: no concurrent servers"
        save()
        return 0
    t1 = time.monotonic()
    base_prof = profiles.load(profiles.base("baseline", args.target, launcher, args.sim),
                              pdir / "baseline.toml")
    spec_profs = {"trained": probe_prof}
    for name in BORROWED:
        doc = profiles.probe(args.target, d / name, work / "dumps" / "heldout", launcher,
                             args.sim, args.steps, label=name)
        spec_profs[name] = profiles.load(doc, pdir / f"probe-{name}.toml")
    jobs: dict[str, tuple[Any, str]] = {f"baseline-{k}": (base_prof, "baseline")
                                        for k in range(1, RESIDENT_BASELINES + 1)}
    jobs |= {f"spec-{n}": (p, "speculative") for n, p in spec_profs.items()}
    handles: dict[str, Any] = {}
    ready: dict[str, float] = {}
    logs = work / "out" / "serve" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with cf.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            ports = free_ports(len(jobs))
            futs = {pool.submit(start, prof, cfg, logs / f"{name}.log", port): name
                    for (name, (prof, cfg)), port in zip(jobs.items(), ports, strict=True)}
            for fut in cf.as_completed(futs):
                name = futs[fut]
                try:
                    handles[name], ready[name] = fut.result()
                    log(f"{name}: ready after {ready[name]:.1f} s at {handles[name].url}")
                except Exception as exc:  # one server failing must not lose the others
                    record.setdefault("failed", {})[name] = str(exc)[:2000]
                    log(f"{name}: FAILED to start: {str(exc)[:400]}")
        record["ready_s"] = {k: round(v, 1) for k, v in ready.items()}
        record["seconds"]["concurrent start"] = round(time.monotonic() - t1, 1)
        save()
        # 3. probe 2, attached
        if "spec-trained" in handles and "baseline-1" in handles and left() > 120:
            t = time.monotonic()
            record["probe-trained-2"] = pytest_probe(
                work, probe_toml, "probe-trained-2",
                [f"{OPTIONS['server_url']}={handles['spec-trained'].url}",
                 f"{OPTIONS['baseline_url']}={handles['baseline-1'].url}"], args.probe_timeout)
            record["seconds"]["probe-trained-2"] = round(time.monotonic() - t, 1)
            save()
        # 4. the borrowed drafter, before and after remap (and with the map copied in)
        t = time.monotonic()
        names = [n for n in BORROWED if f"spec-{n}" in handles] if left() > 45 else []
        with cf.ThreadPoolExecutor(max_workers=max(len(names), 1)) as pool:
            futs2 = {pool.submit(accept_length, handles[f"spec-{n}"].url, spec_profs[n]): n
                     for n in names}
            for done in cf.as_completed(futs2):
                n = futs2[done]
                try:
                    record.setdefault("borrowed", {})[n] = done.result()
                    log(f"{n}: accept length {record['borrowed'][n]['accept_len']}")
                except Exception as exc:
                    record.setdefault("borrowed", {})[n] = {"error": str(exc)[:1000]}
        record["seconds"]["borrowed accept lengths"] = round(time.monotonic() - t, 1)
        save()
        # 2b. each baseline measured while the others sit idle
        built = work / "build.json"
        first = json.loads(built.read_text()).get("variance_first") if built.exists() else None
        rows = [first] if first else []
        for k in range(1, RESIDENT_BASELINES + 1):
            name = f"baseline-{k}"
            if name in handles and left() > 25:
                m = variance.measure(handles[name].url, base_prof)
                rows.append(variance.record(k + 1, f"{name} (launched beside 6 servers)",
                                            ready[name], False, list(base_prof.server.args), m,
                                            len(handles) - 1))
                log(f"{name}: {m['tps']} tok/s with {len(handles) - 1} other servers resident")
        record["variance"] = rows
        save()
        # 5. the first baseline again, alone
        for name, h in list(handles.items()):
            if name != "baseline-1":
                h.stop()
                handles.pop(name)
        if "baseline-1" in handles and left() > 20:
            m = variance.measure(handles["baseline-1"].url, base_prof)
            rows.append(variance.record(2, "baseline-1 again, the other servers stopped",
                                        ready["baseline-1"], False,
                                        list(base_prof.server.args), m, 0))
            log(f"baseline-1 alone: {m['tps']} tok/s")
        record["variance"] = rows
    finally:
        for h in handles.values():
            h.stop()
    record["seconds"]["total"] = round(time.monotonic() - t0, 1)
    save()
    variance.write(record.get("variance", []), work / "out" / "serve")
    log(f"serve done in {record['seconds']['total']} s; {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
