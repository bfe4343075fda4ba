"""Fault modes the simulator can inject, read from SPECGATE_SIM_FAULT (comma-separated)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

ENV_FAULT = "SPECGATE_SIM_FAULT"

FLAGS = (
    "exit_at_start",
    "never_ready",
    "http500",
    "http503",
    "malformed_json",
    "truncated_json",
    "drop_stream",
    "no_spec_fields",
    # The stream stops after a few messages with its socket open and the process alive, as when
    # a collective hangs in the scheduler (health checks fail from then on).
    "stall_mid_stream",
    # The whole stream reaches the client in one burst when it ends, as through a buffering
    # proxy; the server's own timing (and the truth log) is unchanged.
    "buffer_proxy",
    # TP ranks other than 0 start without the NCCL_* variables, as under a launcher that does
    # not forward the environment to its workers.
    "rank_env_dropped",
    # TP rank processes ignore SIGTERM and outlive the server in a session of their own, as a
    # worker stuck in a collective does: only SIGKILL ends them.
    "rank_ignores_term",
)
# die_after:N and hang_after:N take the whole server after N requests; stall_request:N and
# drop_request:N take only the N-th request's stream (stalled with its socket open, or cut),
# while the server serves every other request as usual.
COUNTED = ("die_after", "hang_after", "stall_request", "drop_request")
TIMED = ("slow_start",)


@dataclasses.dataclass(frozen=True)
class Faults:
    """Which faults are on; die_after/hang_after count POST /generate requests served first."""

    flags: frozenset[str] = frozenset()
    die_after: int | None = None
    hang_after: int | None = None
    stall_request: int | None = None
    drop_request: int | None = None
    slow_start_s: float | None = None

    def __contains__(self, name: object) -> bool:
        return name in self.flags


def parse_faults(text: str) -> Faults:
    """`exit_at_start`, `die_after:3,no_spec_fields`, `slow_start:2.5`, … ; unknown names fail."""
    flags: set[str] = set()
    counts: dict[str, int] = {}
    slow: float | None = None
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, value = item.partition(":")
        try:
            if name in FLAGS and not value:
                flags.add(name)
            elif name in COUNTED and value:
                counts[name] = int(value)
            elif name in TIMED and value:
                slow = float(value)
            else:
                raise ValueError(item)
        except ValueError:
            known = ", ".join([*FLAGS, *(f"{n}:N" for n in COUNTED), "slow_start:S"])
            raise ValueError(
                f"{ENV_FAULT}: cannot read {item!r}; known faults are {known}"
            ) from None
    return Faults(
        flags=frozenset(flags),
        die_after=counts.get("die_after"),
        hang_after=counts.get("hang_after"),
        stall_request=counts.get("stall_request"),
        drop_request=counts.get("drop_request"),
        slow_start_s=slow,
    )


def faults_from_env(env: Mapping[str, str]) -> Faults:
    return parse_faults(env.get(ENV_FAULT, ""))
