"""The rank zygote: the template process an assignment's ranks are forked from, and the walls
around each group of ranks.

The grader (:mod:`sandbox.multirank`) starts ``sandbox/rank_worker.py`` once, as
``python -I -S -B rank_worker.py --zygote FD`` with an empty environment, no terminal and a
session of its own: isolated mode, no ``site``, FD a Unix socket to the grader. The zygote
builds the file system every group shares, imports torch, numpy and torch.distributed and
warms them up; then, for each group the grader asks for, it forks a *leader* and forgets
the group. It never holds grading state: no submission, no input, no expected value and no
grader module ever passes through it (they go from the grader straight to each rank, over
that rank's own socket, whose descriptor the zygote hands on unread). A rank forked from it
finds only torch, numpy and the standard library in memory, never a classmate's code.

The walls, strongest first (``auto`` takes the first the machine allows):

1. ``namespaces``: the zygote enters a mount namespace whose root is a small read-only tree
   of the standard library, torch and the packages it imports, numpy and the system
   libraries (:mod:`.root`): no course package, no grader module file, no master notebook,
   no class folder, no home folder exists there. Each group gets its own network (only a
   loopback: no other group's ranks are on it), PID, IPC and UTS namespaces and a fresh
   ``/proc``; each rank its own mount namespace with a private, size-capped tmpfs on
   ``/tmp`` and ``/dev/shm`` (ranks of one group share no file either). PID 1 of the group
   (the *init*, :mod:`.group`) runs no student code; when it dies the kernel kills
   everything in the group, whatever it did (double forks, ``setsid``, ignored signals).
2. ``uid``: the grader is root but namespaces are refused (a Docker container under its
   default profile, as on Gradescope): each group's ranks ``chroot`` into an empty folder
   of their own and drop to a uid leased to that group; the grader kills everything that
   runs as that uid when the group ends.
3. ``rlimits``: neither (a student's laptop): the limits below only.

In every mode each rank: a session of its own without a controlling terminal (no
``TIOCSTI`` into anyone's terminal: it holds no terminal descriptor), every descriptor closed
but its own socket to the grader, an empty environment, a parent-death signal (a rank dies
with its group, a group with the zygote, the zygote when the grader's socket closes),
resource limits (CPU seconds, tasks, address space, file size, open files, no core), an
unprivileged uid where the zygote is root, and the exercises' seccomp filter
(:mod:`sandbox.confined.seccomp`) once gloo's connections are made.

This package imports only the standard library at module level (torch is imported by the
zygote once its root stands). The zygote imports it as ``sandbox.ranks`` from the course's
folder before the root replaces the file system; nothing of the course is imported.
"""
