"""A stand-in for an SGLang server: known timing and acceptance model, fault modes.

By default it behaves as real SGLang 0.5.17 did on an H200 (tests/data/real-sglang-0.5.17/):
a start that outlasts the harness's first progress report (1.6 s; SPECGATE_SIM_START_DELAY_S),
a /health_generate (and /health) that runs a one-token generation and answers after ~1 s
(SPECGATE_SIM_HEALTH_GENERATE_S), SGLang's exact wire format (`data: {json}\\n\\n` messages in
chunked encoding, compact JSON, meta_info keys in SGLang's order, spec_* fields on the final
message only and only when spec_verify_ct > 0, `server: uvicorn`), a first streamed message
that carries the first decode step or verify cycle too (SGLang keeps only the newest queued
output; SPECGATE_SIM_FIRST_MERGE, 0 = no merge), and at SIGTERM server-side closes of its
keep-alive connections, leaving TIME_WAIT on its port (it binds with SO_REUSEADDR, as uvicorn).
Fault modes: SPECGATE_SIM_FAULT (see faults.py), e.g. stall_mid_stream and buffer_proxy.

Batching. Requests in flight together are batched as SGLang's scheduler batches them
(engine.py): prefilled together, then decoded in one running batch whose step time grows with
the tokens it carries (model.py, BATCHING): a decode step gets cheaper per sequence, a verify
multiplies every sequence's work, so the speed-up falls with the concurrency and crosses 1 at
model.crossover_batch. One request alone is timed exactly as before batching existed.

Truth log. With SPECGATE_SIM_TRUTH=<path> the server appends one JSON object per line for each
/generate request it served (health checks are not logged), written before `data: [DONE]`
(streams) or before the body (plain requests), so a client that has its answer finds its line:

    rid                   meta_info.id of the request
    stream                whether it was streamed
    outcome               finished | stalled (stall_mid_stream, stall_request) |
                          dropped (drop_stream, drop_request)
    fault                 the SPECGATE_SIM_FAULT flags in force, comma-separated
    t_received            time.monotonic() when the request was read
    t_first_sent          time.monotonic() just before the first message's bytes were written
    t_final_sent          the same for the final message (null unless finished)
    t_delivered           when the bytes left the process (later than t_final_sent only with
                          buffer_proxy, whose t_*_sent are when the server produced them)
    t_first_due, t_final_due
                          when the scheduler's step behind the first / final message ended:
                          the timing model's schedule, which the messages keep or, on a busy
                          machine, follow late (null for a message never sent)
    prompt_tokens, completion_tokens
    first_message_tokens  completion_tokens of the first message (all of them when not streamed)
    messages              data messages sent (before a stall or drop: those sent so far)
    verify_ct             spec_verify_ct (0 on a baseline server or a one-token answer)
    accepted_drafts       spec_num_correct_drafts
    finish_reason         "stop" | "length" (null unless finished)
    batch                 sequences in the scheduler's batch, averaged over its decode steps
    decode_tokens         completion_tokens - first_message_tokens
    decode_tps            decode_tokens / (t_final_sent - t_first_sent); null when undefined

Every record is one request; a stream that stalled or was cut has its record too, so a client
that loses a stream can be held to account for it.

Launch to launch. With SPECGATE_SIM_LAUNCH_SPREAD=σ every launch runs at its own speed: a factor
exp(N(0, σ²)) divides every per-step cost, drawn from SPECGATE_SIM_LAUNCH_SEED and the launch's
number in the truth log when given (model.launch_speed). The truth log then starts each launch
with one line `{"launch": k, "role", "speed", "spread", "seed", "pid"}` (model.read_launches;
read_truth leaves these lines out), and /server_info's simulator.launch_speed says it too.

Clock: CLOCK_MONOTONIC, which time.monotonic() and time.perf_counter() read in every process on
Linux, so a client's arrival times compare with these directly. Truths a harness is held to:
decode tok/s = Σ decode_tokens / Σ (t_final_sent - t_first_sent) (model.decode_tps_of) and
accept length = Σ completion_tokens / Σ verify_ct (model.accept_length_of); model.read_truth
reads the file. The same rate on the schedule (t_*_due, model.due_decode_tps_of) is the timing
model's, whatever the load on the machine.
"""

from __future__ import annotations

from specgate.testing.simulator.model import (
    ENV_LAUNCH_SEED,
    ENV_LAUNCH_SPREAD,
    ENV_TRUTH,
    LaunchTruth,
    RequestTruth,
    SimParams,
    Truth,
    accept_length_of,
    crossover_batch,
    decode_tps_of,
    due_decode_tps_of,
    launch_speed,
    load_params,
    read_launches,
    read_truth,
    truth,
    truth_for_profile,
)

__all__ = [
    "ENV_LAUNCH_SEED",
    "ENV_LAUNCH_SPREAD",
    "ENV_TRUTH",
    "LaunchTruth",
    "RequestTruth",
    "SimParams",
    "Truth",
    "accept_length_of",
    "crossover_batch",
    "decode_tps_of",
    "due_decode_tps_of",
    "launch_speed",
    "load_params",
    "read_launches",
    "read_truth",
    "truth",
    "truth_for_profile",
]
