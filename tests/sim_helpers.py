"""Simulator servers for the harness's tests: model folders, a started server, its truth log."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests
from helpers_ckpt import tiny_drafter

from specgate.testing.simulator import model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def model_dirs(root: Path, timing: Mapping[str, Any], acceptance: list[float]
               ) -> tuple[Path, Path]:
    """A target folder with the simulator's timing and a whole drafter (SGLang will not start on
    a config alone) with its acceptance."""
    target, draft = root / "target", root / "draft"
    target.mkdir(parents=True)
    tiny_drafter(draft, config_overrides={"max_position_embeddings": 8192})
    (target / model.SIM_FILE).write_text(json.dumps(dict(timing)))
    (draft / model.SIM_FILE).write_text(json.dumps({"acceptance": acceptance}))
    return target, draft


def spec_args(target: Path, draft: Path, steps: int) -> list[str]:
    return ["--model-path", str(target), "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", str(draft), "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]


def start(argv: list[str], log: Path, truth: Path, env: Mapping[str, str] | None = None
          ) -> tuple[subprocess.Popen[bytes], str]:
    """A simulator that logs every request it serves to `truth`; (process, URL) once ready."""
    port = free_port()
    fh = open(log, "wb")  # the child writes to it for its whole life
    proc = subprocess.Popen([sys.executable, "-m", "specgate.testing.simulator", *argv,
                             "--port", str(port)], stdout=fh, stderr=subprocess.STDOUT,
                            env={**os.environ, model.ENV_TRUTH: str(truth),
                                 "SPECGATE_SIM_START_DELAY_S": "0.1", **(env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except requests.ConnectionError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("simulator did not get ready:\n" + log.read_text())


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(10)


def served(truth: Path) -> list[model.RequestTruth]:
    return model.read_truth(truth) if truth.exists() else []
