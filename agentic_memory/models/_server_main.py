"""Run a model server that exits as soon as the process that started it is gone.

Started as ``python _server_main.py <module-or-script> [server arguments...]`` with the read
end of a pipe as standard input; the starting process holds the write end and never writes.
When that process ends for any reason (normal exit, crash, SIGTERM or SIGKILL), the kernel
closes the write end, the read below returns end-of-file, and this process exits at once,
even in the middle of a generation. That covers what ``PR_SET_PDEATHSIG`` covers, and more
safely: the parent-death signal fires when the *thread* that spawned the child exits, and
the local server is started from short-lived worker threads.

Only the standard library is imported here, so this file runs by path under any
interpreter that has the server installed, whatever ``sys.path`` the parent had.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading

# The exit code when the starting process is gone; distinct from the server's own codes.
PARENT_GONE_EXIT = 75


def _exit_when_parent_gone() -> None:
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os._exit(PARENT_GONE_EXIT)


def main() -> None:
    """Watch standard input, then run the server module (or script) named first."""
    if len(sys.argv) < 2:
        sys.stderr.write("usage: _server_main.py <module|script.py> [arguments...]\n")
        sys.exit(2)
    target, arguments = sys.argv[1], sys.argv[2:]
    threading.Thread(target=_exit_when_parent_gone, name="parent-watch", daemon=True).start()
    sys.argv = [target, *arguments]
    if target.endswith(".py"):
        runpy.run_path(target, run_name="__main__")
    else:
        runpy.run_module(target, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
