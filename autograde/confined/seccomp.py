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
  inspection and kernel interfaces nothing here needs.
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
               "bpf": 321, "io_uring_setup": 425, "unshare": 272, "setns": 308},
    "aarch64": {"setsid": 157, "setpgid": 154, "flock": 32, "socket": 198, "socketpair": 199,
                "shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180, "ptrace": 117,
                "process_vm_readv": 270, "process_vm_writev": 271, "add_key": 217,
                "request_key": 218, "keyctl": 219, "perf_event_open": 241, "userfaultfd": 282,
                "bpf": 280, "io_uring_setup": 425, "unshare": 97, "setns": 268},
}
SECCOMP_FCNTL = {"x86_64": 72, "aarch64": 25}
#: F_GETLK, F_SETLK, F_SETLKW and their open-file-description forms.
FCNTL_LOCKS = (5, 6, 7, 36, 37, 38)


def seccomp_program(machine: str) -> bytes:
    """A classic-BPF seccomp filter refusing :data:`SECCOMP_DENY` and fcntl's lock commands
    (``struct sock_filter`` entries; see Documentation/userspace-api/seccomp_filter.rst).
    Any other architecture (a 32-bit call on x86_64) or an x32 system call is killed."""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, kill, eperm = 0x7FFF0000, 0x80000000, 0x00050000 | 1
    deny = sorted(SECCOMP_DENY[machine].values())
    n, m = len(deny), len(FCNTL_LOCKS)
    refuse = 6 + n + 3 + m + 1  # index of the final "return EPERM"
    prog = [(ld_abs, 0, 0, 4), (jeq, 1, 0, SECCOMP_ARCH[machine]), (ret, 0, 0, kill),
            (ld_abs, 0, 0, 0), (jge, 0, 1, 0x40000000), (ret, 0, 0, kill)]
    for number in deny:
        prog.append((jeq, refuse - len(prog) - 1, 0, number))
    prog += [(jeq, 1, 0, SECCOMP_FCNTL[machine]), (ret, 0, 0, allow),
             (ld_abs, 0, 0, 24)]  # fcntl: the low 32 bits of args[1] (little-endian)
    for cmd in FCNTL_LOCKS:
        prog.append((jeq, refuse - len(prog) - 1, 0, cmd))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    assert len(prog) == refuse + 1
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


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

