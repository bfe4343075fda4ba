"""What the SGLang simulator stands for, known to the main path without importing it."""

# The SGLang release whose HTTP surface and timing the simulator reproduces.
SGLANG_VERSION = "0.5.17"
