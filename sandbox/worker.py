"""The program the grader starts as the sandbox's template process (the *zygote*):

    python -I -S -B sandbox/worker.py --zygote FD

Isolated mode and no ``site`` leave this file's folder off ``sys.path``; it puts it back (at
the end, after the standard library) only long enough to import :mod:`sandbox.confined`
as the top-level package ``confined``, which holds the zygote, the walls and the in-sandbox
runtime (see its docstring). The zygote then replaces ``sys.path`` with what a worker may
import.
"""
import os
import sys

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--zygote":
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
        from confined.zygote import zygote

        zygote(int(sys.argv[2]))
    else:
        sys.exit("usage: python -I -S -B worker.py --zygote FD (started by sandbox.handle)")
