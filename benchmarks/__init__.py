"""specgate's benchmarks, GPU harnesses and their results (`python -m benchmarks.…`)."""
