"""The live claims of the environment: env.gpu_clean and env.server_env."""

from __future__ import annotations

from typing import Any

from specgate.claims import ids
from specgate.claims import result as claims
from specgate.claims.live_run import (
    PHASE,
    blocked,
    failure_cause,
    first_line,
    sim,
)
from specgate.claims.result import ClaimResult
from specgate.core.profile import Profile
from specgate.core.redact import mask_env
from specgate.results.live import ConfigRun, LiveResults


def gpu_clean_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """env.gpu_clean: no other process holds any GPU of the server's set before each launch."""
    cid = ids.GPU_CLEAN.id
    checks = [(r.config, r.gpu) for r in (live.baseline, live.speculative)
              if r.gpu is not None and not r.attached]
    if not checks:
        return claims.skipped(cid, PHASE, sim(live) + "no server was launched by specgate "
                              "(attached to running servers), so there was no launch to check")
    done = [(c, g) for c, g in checks if g.checked]
    if not done:
        return claims.skipped(cid, PHASE, sim(live) + checks[0][1].reason)
    checked = {c: list(g.gpus) for c, g in done}
    offenders = [(c, o) for c, g in done for o in g.offenders]
    if offenders:
        listed = "; ".join(
            f"before the {c} launch: pid {o.get('pid')} {o.get('process_name', '?')} on GPU "
            f"{o.get('gpu_index', '?')} holding {o.get('used_memory_mib', '?')} MiB"
            for c, o in offenders)
        return claims.failed(cid, PHASE, sim(live) + f"other processes hold the server's GPUs: "
                             f"{listed}. Stop them (or pick free GPUs in [server] gpus) so the "
                             "benchmark measures this server alone.",
                             observed=len(offenders), expected=0, unit="processes",
                             details={"offenders": [o for _, o in offenders],
                                      "gpus_checked": checked})
    return claims.passed(cid, PHASE, sim(live) + "no other process on the server's GPUs before "
                         + " or ".join(f"the {c} launch" + (f" (GPUs {g.gpus and list(g.gpus)})"
                                                            if g.gpus else "")
                                       for c, g in done),
                         observed=0, expected=0, unit="processes",
                         details={"gpus_checked": checked})


def server_env_claim(profile: Profile, live: LiveResults) -> ClaimResult:
    """env.server_env: each launched server's serving process and every one of its TP rank
    processes carry the profile's [server] env."""
    cid = ids.SERVER_ENV.id
    if not profile.server.env:
        return claims.skipped(cid, PHASE, "the profile sets no [server] env, so there is "
                              "nothing to check")
    runs = [r for r in (live.baseline, live.speculative)]
    checked = [r for r in runs if r.env is not None and r.env.checked]
    expected = mask_env(profile.server.env)
    bad: dict[str, dict[str, Any]] = {}
    for r in checked:
        assert r.env is not None
        wrong: dict[str, Any] = {}
        if r.env.mismatched:
            wrong["serving process"] = r.env.mismatched
        wrong.update(r.env.rank_mismatched)
        if wrong:
            bad[r.config] = wrong
    ranks = {r.config: _ranks_read(r) for r in checked if r.env is not None}
    unread_ranks = {r.config: r.env.ranks_unread for r in checked
                    if r.env is not None and r.env.ranks_unread}
    details = {"ranks": {r.config: list(r.env.ranks) for r in checked if r.env is not None},
               "ranks_unread": unread_ranks}
    if bad:
        parts = "; ".join(
            f"{c}, {where}: " + ", ".join(f"{k}={v!r} (expected {expected[k]!r})"
                                          for k, v in mm.items())
            for c, by_where in bad.items() for where, mm in by_where.items())
        return claims.failed(cid, PHASE, sim(live) + f"the server started without the "
                             f"[server] env the profile requires: {parts}. Check the launcher "
                             "(a remote or container launcher may drop the environment, and a "
                             "launcher that starts the TP workers itself may not forward it).",
                             observed=bad, expected=expected, details=details)
    if checked:
        unread = "; ".join(f"{c}: {', '.join(u)} not found"
                           for c, u in unread_ranks.items())
        return claims.passed(cid, PHASE, sim(live) + "the server process environment carries "
                             + ", ".join(f"{k}={v}" for k, v in expected.items()) + " ("
                             + ", ".join(f"{r.config}{ranks[r.config]}" for r in checked) + ")"
                             + (f"; TP ranks whose environment was not read: {unread}"
                                if unread else ""),
                             observed=checked[0].env.found if checked[0].env else None,
                             expected=expected, details=details)
    failed = [r for r in runs if r.failure is not None and r.failure.stage == "start"]
    reasons = [r.env.reason for r in runs if r.env is not None]
    if failed and not reasons:
        # An attached server that could not be used kept the other from being launched.
        first = next((r for r in failed if r.attached), failed[0])
        none = "no server could be used" if first.attached else "no server started"
        return blocked(cid, live, f"{none}, so its environment could not be read: "
                       + first_line(first), cause=failure_cause(first))
    why = reasons[0] if reasons else "the servers were attached, not launched by specgate"
    return claims.skipped(cid, PHASE, sim(live) + f"cannot check the server environment: {why}")


def _ranks_read(run: ConfigRun) -> str:
    """", serving process and TP ranks 0, 1" for the claim's message."""
    env = run.env
    read = sorted({int(r["rank"]) for r in env.ranks if isinstance(r.get("found"), dict)}) \
        if env is not None else []
    return f": serving process and TP rank{'s' if len(read) > 1 else ''} " \
           f"{', '.join(map(str, read))}" if read else ""

