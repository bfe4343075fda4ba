"""`python -m specgate.cli`: the `specgate` command where its script is not on PATH."""

import sys

from specgate.cli import main

sys.exit(main())
