"""Check the launch command of every profile with a real SGLang's own argument parser.

    python tests/sglang_preflight_check.py --python /tmp/sgvenv/bin/python [PROFILE.toml ...]

Same as `specgate preflight`, for CI scripts that call this file by path.
"""

import sys

from specgate.cli.preflight import main_preflight

if __name__ == "__main__":
    sys.exit(main_preflight())
