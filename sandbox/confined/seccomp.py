"""The seccomp filter every worker loads (Linux's system-call filter): the system calls a
worker never needs and that would let it reach beyond its own lifetime or into another
sandbox (numbers from the kernel's syscall tables). Refused with EPERM, so Python raises
PermissionError:

* setsid, setpgid: leaving the process group the zygote kills (the modes without a PID
  namespace rely on it);
* flock and fcntl's record locks: byte-range locks are kernel state on files every sandbox
  can open (the standard library), a channel that survives file permissions;
* socket, socketpair: abstract Unix sockets reach across sandboxes without a network
  namespace; no worker needs a socket (the grader talks over inherited pipes);
* SysV IPC, POSIX message queues, key rings: kernel objects that outlive the process (a
  uid's key ring outlives all its processes, and uids are reused by later sandboxes);
* ptrace, process_vm_*, perf_event_open, userfaultfd, bpf, io_uring, unshare, setns:
  inspection and kernel interfaces nothing here needs;
* inotify and fanotify: every namespace sandbox bind-mounts the same read-only inodes (the
  standard library, numpy), so a watch in one sandbox would see another's ``open()``s: a
  channel between two classmates graded at once;
* clone with any ``CLONE_NEW*`` flag (a new user namespace makes its child root there, and
  able to mount); ``clone3``, whose flags sit in memory a filter cannot read, returns
  ENOSYS instead, as in Docker's default profile, so that the C library falls back to
  ``clone`` (which the filter can check).
"""
from __future__ import annotations

import ctypes
import platform
import struct
import sys

from .kernel import PR_SET_SECCOMP, SetupError, check

SECCOMP_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SECCOMP_DENY = {
    "x86_64": {"setsid": 112, "setpgid": 109, "flock": 73, "socket": 41, "socketpair": 53,
               "shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240, "ptrace": 101,
               "process_vm_readv": 310, "process_vm_writev": 311, "add_key": 248,
               "request_key": 249, "keyctl": 250, "perf_event_open": 298, "userfaultfd": 323,
               "bpf": 321, "io_uring_setup": 425, "unshare": 272, "setns": 308,
               "inotify_init": 253, "inotify_init1": 294, "fanotify_init": 300},
    "aarch64": {"setsid": 157, "setpgid": 154, "flock": 32, "socket": 198, "socketpair": 199,
                "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180, "ptrace": 117,
                "process_vm_readv": 270, "process_vm_writev": 271, "add_key": 217,
                "request_key": 218, "keyctl": 219, "perf_event_open": 241, "userfaultfd": 282,
                "bpf": 280, "io_uring_setup": 425, "unshare": 97, "setns": 268,
                "inotify_init1": 26, "fanotify_init": 262},
}
SECCOMP_FCNTL = {"x86_64": 72, "aarch64": 25}
#: F_GETLK, F_SETLK, F_SETLKW and their open-file-description forms.
FCNTL_LOCKS = (5, 6, 7, 36, 37, 38)


SECCOMP_CLONE = {"x86_64": 56, "aarch64": 220}
SECCOMP_CLONE3 = {"x86_64": 435, "aarch64": 435}
#: Every CLONE_NEW* flag (mount, cgroup, UTS, IPC, user, PID, network): Docker's mask.
CLONE_NEW_MASK = 0x7E020000
ENOSYS = 38


def assemble(program: list) -> bytes:
    """Classic BPF from ``(opcode, k, jump if true, jump if false)`` tuples and ``"name:"``
    labels; a jump names a label (forward only) or is None (the next instruction)."""
    labels, count = {}, 0
    for item in program:
        if type(item) is str:
            labels[item.rstrip(":")] = count
        else:
            count += 1
    out, index = [], 0
    for item in program:
        if type(item) is str:
            continue
        op, k, true, false = (tuple(item) + (None, None))[:4]
        offsets = [0 if j is None else labels[j] - index - 1 for j in (true, false)]
        assert all(0 <= o < 256 for o in offsets), item
        out.append(struct.pack("<HBBI", op, offsets[0], offsets[1], k))
        index += 1
    return b"".join(out)


def seccomp_program(machine: str) -> bytes:
    """A classic-BPF seccomp filter refusing :data:`SECCOMP_DENY`, fcntl's lock commands and
    clone's namespace flags, with ENOSYS for clone3 (``struct sock_filter`` entries; see
    Documentation/userspace-api/seccomp_filter.rst). Any other architecture (a 32-bit call
    on x86_64) or an x32 system call is killed."""
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill, errno = 0x7FFF0000, 0x80000000, 0x00050000
    nr, arch, arg0, arg1 = 0, 4, 16, 24  # offsets in struct seccomp_data (low 32 bits)
    return assemble([
        (ld_abs, arch), (jeq, SECCOMP_ARCH[machine], None, "kill"),
        (ld_abs, nr), (jge, 0x40000000, "kill"),
        *[(jeq, number, "eperm") for number in sorted(SECCOMP_DENY[machine].values())],
        (jeq, SECCOMP_CLONE3[machine], "enosys"),
        (jeq, SECCOMP_CLONE[machine], "clone"),
        (jeq, SECCOMP_FCNTL[machine], "fcntl"),
        (ret, allow),
        "clone:", (ld_abs, arg0), (jset, CLONE_NEW_MASK, "eperm"), (ret, allow),
        "fcntl:", (ld_abs, arg1), *[(jeq, cmd, "eperm") for cmd in FCNTL_LOCKS], (ret, allow),
        "kill:", (ret, kill),
        "eperm:", (ret, errno | 1),
        "enosys:", (ret, errno | ENOSYS),
    ])


def install_seccomp(libc) -> None:
    """Load :func:`seccomp_program` into this process (no new privileges must be set)."""
    machine = platform.machine()
    if machine not in SECCOMP_ARCH or sys.byteorder != "little":
        raise SetupError(f"seccomp: no system call table for {machine}")
    code = seccomp_program(machine)
    filters = ctypes.create_string_buffer(code, len(code))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    program = Program(len(code) // 8, ctypes.addressof(filters))
    check(libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(program), 0, 0), "seccomp")

