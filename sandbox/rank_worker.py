"""The program the grader starts as the rank zygote (see :mod:`sandbox.ranks`):

    python -I -S -B sandbox/rank_worker.py --zygote FD

Isolated mode and no ``site``: no environment variable, user site or ``.pth`` file shapes it.
It puts the course's folder on ``sys.path`` only long enough to import :mod:`sandbox.ranks`
(which imports the standard library alone); the zygote then replaces ``sys.path`` (and, with
namespaces, the whole file system) with what a rank may import.
"""
import os
import sys

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--zygote":
        course = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.path.append(course)
        from sandbox.ranks.zygote import zygote

        sys.path.remove(course)
        zygote(int(sys.argv[2]))
    else:
        sys.exit("usage: python -I -S -B rank_worker.py --zygote FD (started by sandbox.multirank)")
