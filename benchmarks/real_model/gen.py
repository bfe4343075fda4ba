"""Greedy answers from a running SGLang server, many prompts in flight, and GPU state readings.

`generate` posts batches of prompts (token ids or text) to /generate from several threads at
once, so the server keeps many requests running; each answer is SGLang's `output_ids`.
`gpu_state` reads nvidia-smi's clocks, power, performance state and resident processes.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

BATCH = 64  # prompts per /generate request
THREADS = 8  # requests in flight


def post(url: str, body: dict[str, Any], timeout_s: float = 900.0) -> Any:
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def answer_ids(item: dict[str, Any]) -> list[int]:
    """The generated token ids of one /generate result (SGLang returns them as output_ids)."""
    ids = item.get("output_ids")
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise ValueError(f"the server's answer has no output_ids (keys: {sorted(item)})")
    return list(ids)


def generate(url: str, prompts: Sequence[list[int] | str], max_new_tokens: int, *,
             batch: int = BATCH, threads: int = THREADS,
             progress: Callable[[str], None] | None = None,
             stop_at: float | None = None) -> list[dict[str, Any]]:
    """Greedy (temperature 0) answers, in prompt order: output_ids, finish reason, prompt and
    completion token counts as the server reports them. With stop_at (time.monotonic()), no
    batch is sent after it: the answers of the first prompts only."""
    params = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
    chunks = [list(prompts[i:i + batch]) for i in range(0, len(prompts), batch)]
    results: list[list[dict[str, Any]] | None] = [None] * len(chunks)
    done = 0

    def one(k: int) -> None:
        if stop_at is not None and k > 0 and time.monotonic() >= stop_at:
            return
        chunk = chunks[k]
        key = "text" if isinstance(chunk[0], str) else "input_ids"
        out = post(url, {key: chunk, "sampling_params": params})
        if not isinstance(out, list) or len(out) != len(chunk):
            raise ValueError(f"/generate answered {type(out).__name__} for a batch of "
                             f"{len(chunk)}")
        results[k] = [{"output_ids": answer_ids(item),
                       "finish": (item.get("meta_info") or {}).get("finish_reason"),
                       "prompt_tokens": (item.get("meta_info") or {}).get("prompt_tokens"),
                       "completion_tokens": (item.get("meta_info") or {}).get(
                           "completion_tokens")} for item in out]

    started = time.monotonic()
    with cf.ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(one, k) for k in range(len(chunks))]
        for fut in cf.as_completed(futures):
            fut.result()
            done += 1
            if progress is not None and (done % 10 == 0 or done == len(chunks)):
                tokens = sum(len(r["output_ids"]) for part in results if part for r in part)
                progress(f"generate: {done}/{len(chunks)} batches, {tokens} tokens, "
                         f"{tokens / max(time.monotonic() - started, 1e-9):.0f} tok/s")
    return sent_in_order(results)


def sent_in_order(results: Sequence[list[dict[str, Any]] | None]) -> list[dict[str, Any]]:
    """The answers of batches sent in order, up to the first batch left unsent (None)."""
    out: list[dict[str, Any]] = []
    for part in results:
        if part is None:
            break
        out.extend(part)
    return out


GPU_FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "power.draw", "pstate",
              "temperature.gpu", "utilization.gpu", "memory.used", "clocks_throttle_reasons.active")


def gpu_state() -> dict[str, Any]:
    """nvidia-smi's reading now: clocks (MHz), power (W), pstate, temperature, utilisation,
    memory used, throttle reasons, and the compute processes resident on the GPU."""
    if shutil.which("nvidia-smi") is None:
        return {"error": "nvidia-smi is not on this machine"}
    out: dict[str, Any] = {"time": time.time()}
    try:
        got = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20, check=False)
        values = [v.strip() for v in got.stdout.strip().splitlines()[0].split(",")]
        out.update(dict(zip(GPU_FIELDS, values, strict=False)))
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=20, check=False)
        out["compute_apps"] = [line.strip() for line in apps.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError, IndexError) as exc:
        out["error"] = f"nvidia-smi failed: {exc}"
    return out
