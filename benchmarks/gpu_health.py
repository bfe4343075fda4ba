"""The health scan of a real bf16 drafter: specgate's CPU path against a torch/CUDA path.

Prints one JSON line: the file size, `cat` bandwidth, the CPU scan (1 and N workers) and the GPU
scan (read on the CPU, copy to the GPU, check there) in GB/s, plus the GPU's own check time with
the data already on it. Run it on a machine with a GPU:

    python -m benchmarks.gpu_health [--dir FOLDER]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from specgate.io import health
from specgate.io.checkpoint import open_drafter
from specgate.testing import generate

CHUNK = 256 * 1024 * 1024


def cat_gbps(files: list[Path]) -> float:
    size = sum(f.stat().st_size for f in files)
    t = time.perf_counter()
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    return size / (time.perf_counter() - t) / 1e9


def gpu_scan(drafter_dir: Path) -> dict[str, float]:
    import torch

    d = open_drafter(drafter_dir)
    dev = torch.device("cuda")
    pinned = torch.empty(CHUNK // 2, dtype=torch.int16).pin_memory()
    gpu_buf = torch.empty(CHUNK // 2, dtype=torch.int16, device=dev)
    bad = torch.zeros((), dtype=torch.bool, device=dev)
    total = 0
    torch.cuda.synchronize()
    t = time.perf_counter()
    for info in d.tensors.values():
        if info.dtype != "BF16":
            continue
        with open(info.file, "rb") as fh:
            fh.seek(info.start)
            left = info.nbytes
            nonzero = torch.zeros((), dtype=torch.bool, device=dev)
            while left:
                n = min(left, CHUNK)
                view = pinned[: n // 2].numpy().view(np.uint8)
                fh.readinto(memoryview(view))
                g = gpu_buf[: n // 2]
                g.copy_(pinned[: n // 2], non_blocking=True)
                x = g & 0x7FFF
                bad |= ((x & 0x7F80) == 0x7F80).any()
                nonzero |= (x != 0).any()
                torch.cuda.synchronize()  # the pinned buffer is reused next round
                left -= n
                total += n
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    # The check alone, with the bytes already on the GPU.
    resident = torch.randint(0, 2**15, (total // 2,), dtype=torch.int16, device=dev) \
        if total < 40e9 else gpu_buf
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    for _ in range(5):
        x = resident & 0x7FFF
        ((x & 0x7F80) == 0x7F80).any().item()
        (x != 0).any().item()
    torch.cuda.synchronize()
    check_s = (time.perf_counter() - t2) / 5
    return {"gpu_scan_gbps": total / seconds / 1e9, "gpu_check_only_gbps": total / check_s / 1e9,
            "gpu_bytes": total, "gpu_found_bad": bool(bad.item())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=Path("/tmp/specgate-gpu-health"))
    p.add_argument("--small", action="store_true", help="a small drafter, for a CPU smoke run")
    args = p.parse_args()
    shape = generate.small() if args.small else generate.aq_medai_k2()
    out = args.dir / "drafter"
    if not (out / "config.json").exists():
        t = time.perf_counter()
        generate.write_drafter(out, shape, fill="random", include_embed=False)
        print(f"wrote {out} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    files = sorted(out.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files)
    result: dict[str, object] = {"bytes": size, "cpus": os.cpu_count()}
    cat_gbps(files)  # warm the page cache: every path below reads from memory
    result["cat_gbps"] = round(cat_gbps(files), 2)
    d = open_drafter(out)
    for workers in (1, 4):
        t = time.perf_counter()
        rep = health.scan(d, workers=workers, skip_holes=False)
        result[f"cpu_scan_w{workers}_gbps"] = round(size / (time.perf_counter() - t) / 1e9, 2)
        result["cpu_problems"] = len(getattr(rep, "problems", []) or [])
    try:
        import torch

        if torch.cuda.is_available():
            result["gpu"] = torch.cuda.get_device_name(0)
            result.update({k: (round(v, 2) if isinstance(v, float) else v)
                           for k, v in gpu_scan(out).items()})
    except ImportError:
        result["gpu"] = None
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
