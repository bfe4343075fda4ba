"""A container's PID 1 without an init, for the docker stand-in: `docker exec` starts the
command inside the container's PID namespace, so a process of its tree whose parent ends is
adopted by the container's PID 1; an application running as PID 1 (a container started without
`--init`) never waits for such adoptees, and each one that ends stays a zombie there.

This process takes that place for the command it runs (PR_SET_CHILD_SUBREAPER, prctl(2): "the
orphaned process will be reparented to the nearest still living ancestor subreaper") and waits
only for the command itself; the exit code is the command's, 126 when it cannot be executed and
127 when it is not found, as `docker exec` gives them.
"""

import ctypes
import subprocess
import sys

PR_SET_CHILD_SUBREAPER = 36

ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
try:
    command = subprocess.Popen(sys.argv[1:])
except FileNotFoundError:
    sys.exit(127)
except OSError:
    sys.exit(126)
sys.exit(command.wait())
