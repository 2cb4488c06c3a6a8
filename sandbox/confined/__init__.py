"""The sandbox: a template process (the *zygote*) and the workers it forks, one per submission.

The grader starts ``sandbox/worker.py`` once as ``python -I -S -B worker.py --zygote FD``:
isolated mode (no environment variables, no user site, not even the script's folder on
``sys.path``) and no
``site`` (so no ``.pth`` file, ``sitecustomize`` or ``usercustomize`` runs); FD is a Unix
socket to the grader. Standard output and error are ``/dev/null``.

The zygote pays once for what every worker needs (the confined file system, Python's start,
importing numpy), then never runs student code: for each submission it forks a worker, which
adds the per-submission walls and serves the grader's requests over two pipes. A fork costs
milliseconds where starting Python and numpy costs a few hundred. Every worker starts from
the same pristine zygote, so nothing one submission does can reach the next.

The walls, strongest first (``auto`` takes the first the platform allows):

1. ``namespaces``. The zygote enters a new mount namespace whose root is a small tmpfs
   holding only read-only bind mounts of the Python standard library (its
   ``site-packages``, and the system's Python packages under ``/usr``, covered by empty
   folders), the allowed packages (numpy) and the system libraries (``/usr``, ``/lib*``):
   no course files, no tests, no solutions, no home folders exist there. Each worker then
   gets new PID, mount, network, IPC and UTS namespaces (no network interface is up; no
   other process is visible or can be signalled), a fresh writable ``/sandbox`` tmpfs
   holding only a copy of the submission, and drops to an unprivileged uid (or, where the
   grader is not root, into a nested user namespace), so it cannot undo any of this. PID 1
   of the namespace is a small trusted init that never runs student code: the zygote kills
   it (it cannot leave the process group it shares with its parent, and its parent-death
   signal survives because it never changes uid), and the kernel then kills every process
   in the namespace, whatever it did to escape (``setsid``, ignored signals, double forks).
2. ``uid``. The grader is root but namespaces are refused (a Docker container under its
   default seccomp profile, as on Gradescope): each worker drops to its own unprivileged
   uid, which cannot signal the grader or other workers, after a ``chroot`` into its own
   folder: no ``/proc`` (the grader's command line names the class folder), no classmates'
   files, no shared ``/tmp``. Modules are preloaded, since nothing else is importable
   there. The grader kills everything that runs as that uid when the worker ends, and
   hands the uid to another submission only once nothing runs as it.
3. ``rlimits``. Neither is possible (a student's laptop): only the limits below.

In every mode: resource limits (CPU seconds, address space, processes, file size, open
files, no core dumps), no PATH, and in the two weaker modes Python-level sockets disabled.
On Linux a seccomp filter (:mod:`.seccomp`) refuses the system calls that would let a
worker leave its process group or reach another sandbox through the kernel (record locks,
sockets, SysV and POSIX IPC, key rings, inotify and fanotify, new namespaces), so that in
the modes without a PID namespace the process group the zygote kills holds everything the
worker started. The zygote is a child subreaper: orphans of a killed worker are reaped at
once. From the outside, the grader (:mod:`sandbox.handle`) also bounds what the whole
process group holds: its memory, and in the modes without a tmpfs, its folder on disk.

Everything after that is untrusted: student code may rewrite any object in its worker. The
grader trusts nothing it says except frames that parse strictly as plain data (see
:mod:`sandbox.protocol`), and enforces every timeout from the outside.

The package imports only the standard library until the walls stand, and never imports the
course: it must run where the course is not visible (``worker.py`` imports it as a
top-level package, from its own folder, before the zygote replaces ``sys.path``).

Modules: :mod:`.frames` (the sandbox's side of the pipes), :mod:`.kernel` (the C library and
Linux constants), :mod:`.isolation` (file system, namespaces, ids, limits), :mod:`.seccomp`
(the system-call filter), :mod:`.runtime` (what a worker does once its walls stand) and
:mod:`.zygote` (the template process's lifecycle).
"""
