"""The file system the rank zygote and its ranks see (``namespaces`` mode): a read-only tree
of the standard library, torch, the packages torch imports, numpy and the system libraries,
and nothing else (see :mod:`sandbox.ranks`)."""
from __future__ import annotations

import os

from ..confined.isolation import (_bind_readonly, _map_ids, _mount, device_nodes, hide_other_packages,
                                  pivot_into, remap_imported_packages, stdlib_dirs)
from ..confined.kernel import (CLONE_NEWNS, CLONE_NEWUSER, MS_NODEV, MS_NOSUID, MS_PRIVATE,
                               MS_REC, check, load_libc)

#: What a rank may import besides the standard library: torch and what ``import torch``
#: and its lazy imports (torch.fx, torch._dynamo) load, and numpy.
PACKAGES = ("torch", "torchgen", "functorch", "numpy", "typing_extensions", "tqdm", "sympy", "mpmath",
            "filelock", "networkx", "jinja2", "markupsafe", "fsspec")
#: Empty folders of the root: mount points (a rank's /tmp and /dev/shm, a group's /proc).
MOUNT_POINTS = ("/tmp", "/dev/shm", "/proc", "/empty")


def package_paths(names=PACKAGES) -> dict:
    """``{name: folder or .py file}`` of each package found for this interpreter (in the
    grader: the zygote runs without ``site`` and cannot look them up), with the vendored
    libraries of manylinux wheels (``numpy.libs``) beside them."""
    import importlib.util

    found = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            folder = list(spec.submodule_search_locations)[0]
            found[name] = folder
            libs = folder.rstrip("/") + ".libs"
            if os.path.isdir(libs):
                found[os.path.basename(libs)] = libs
        elif spec.origin:
            found[os.path.basename(spec.origin)] = spec.origin
    return found


def build_root(root: str, packages: dict) -> list:
    """Pivot this process (the zygote) into a new root under ``root`` (an empty folder)
    holding only what the ranks may use, read-only; return the ``sys.path`` to use there.
    Unprivileged, it first enters a user namespace of its own (where it may mount)."""
    libc = load_libc()
    if os.geteuid() != 0:
        uid, gid = os.geteuid(), os.getegid()
        check(libc.unshare(CLONE_NEWUSER), "unshare(user)")
        _map_ids(uid, gid)
    check(libc.unshare(CLONE_NEWNS), "unshare(mount)")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=512,mode=755")
    for top in ("/usr", "/lib", "/lib64", "/lib32", "/libx32"):  # the system's libraries
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
        elif os.path.isdir(top):
            os.makedirs(root + top)
            _bind_readonly(libc, top, root + top)
    mounts = {f"/py/lib{i}": p for i, p in enumerate(stdlib_dirs())}
    for name, source in packages.items():
        mounts["/py/site/" + name] = source
    for target, source in mounts.items():
        if os.path.isdir(source):
            os.makedirs(root + target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(root + target), exist_ok=True)
            open(root + target, "w").close()
        _bind_readonly(libc, source, root + target)
    hide_other_packages(libc, root, mounts)  # torch, numpy and their needs are the only ones
    device_nodes(libc, root)
    for point in MOUNT_POINTS:
        os.makedirs(root + point, mode=0o755, exist_ok=True)
    pivot_into(libc, root)
    # The zygote's own scratch space (torch's imports ask for a temporary folder); each rank
    # mounts a fresh one over it.
    _mount(libc, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,nr_inodes=1024,mode=1777")
    # torch reads the processor's features from /proc/cpuinfo when it is imported (without
    # them it falls back to its slowest kernels). Each group mounts a /proc of its own over
    # this one, which only the zygote, running no student code, ever sees.
    _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | 8, None)  # MS_NOEXEC
    return remap_imported_packages(mounts)
