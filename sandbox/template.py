"""The grader's side of a template process (a *zygote*): a Python started once, isolated,
that forks the processes student code runs in. The exercises' worker zygote
(:class:`sandbox.handle.Zygote`) and the assignments' rank zygote
(:class:`sandbox.multirank.RankZygote`) are both driven through :class:`TemplateProcess`:
one Unix socket, control messages as frames (:mod:`sandbox.confined.frames`), a lock that
serialises the grading threads' requests, and the template's exit when its socket closes.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .confined import frames


class ZygoteRefused(RuntimeError):
    """The template process could not build the isolation asked for."""


class TemplateProcess:
    """A started template process. Subclasses prepare their folder (:meth:`make_dir`) and
    configuration, then :meth:`launch`; ``what`` names the template in errors, ``child``
    what :meth:`spawn` forks, ``start_timeout`` bounds its start (never the student's fault)."""

    what = "the template process"
    child = "a process"
    start_timeout = 60.0

    def make_dir(self, prefix: str) -> Path:
        """The template's private folder (mode 711), with an empty ``root`` to build on."""
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        os.chmod(self.dir, 0o711)
        (self.dir / "root").mkdir()
        return self.dir

    def launch(self, worker: Path, env: dict, config: dict) -> None:
        """Start ``worker`` as ``python -I -S -B worker --zygote FD`` (isolated mode, no
        ``site``: no environment variable or ``.pth`` file of the grader's reaches it) with
        ``env`` and no other descriptor than its end of the socket, then send ``config``."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        stderr = None if os.environ.get("AUTOGRADE_DEBUG") else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", str(worker), "--zygote", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=stderr, env=env, cwd="/", start_new_session=True)
        theirs.close()
        self.socket, self.lock = ours, threading.Lock()
        self.isolation: str | None = None  # set by wait_ready, from the template's greeting
        try:
            self._ask(config, timeout=self.start_timeout, wait=False)
        except RuntimeError:
            self.close()
            raise

    def refusal(self, message) -> str:
        """The words of a refusal the template sent (it runs no student code, but is read as text)."""
        return str(message or "no greeting")[:300]

    def wait_ready(self):
        """Wait for the greeting that says the walls stand (:meth:`launch` only starts it, so
        that the grader can do other work meanwhile); raise :class:`ZygoteRefused` if the
        isolation asked for could not be built."""
        if self.isolation is None:
            try:
                hello = self._ask(None, timeout=self.start_timeout)
            except RuntimeError:
                self.close()
                raise
            if hello.get("op") != "ready":
                self.close()
                raise ZygoteRefused(self.refusal(hello.get("message")))
            self.isolation = hello["isolation"]
        return self

    def _ask(self, message: dict | None, fds=(), timeout: float = 30.0, *,
             wait: bool = True) -> dict | None:
        """Send ``message`` (None: nothing) and, with ``wait``, return the template's reply."""
        with self.lock:
            try:
                self.socket.settimeout(timeout)
                if message is not None:
                    frames.send_message(self.socket, message, fds)
                if not wait:
                    return None
                reply, _ = frames.recv_message(self.socket)
            except (OSError, ValueError) as exc:
                raise RuntimeError(f"{self.what} failed ({exc})") from None
        if type(reply) is not dict:
            raise RuntimeError(f"{self.what} has stopped")
        return reply

    def spawn(self, job: dict, fds) -> int:
        reply = self._ask({"op": "spawn", "job": job}, fds)
        if type(reply.get("pid")) is not int:
            raise RuntimeError(f"{self.what} could not fork {self.child}")
        return reply["pid"]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def remove_dir(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.close()  # the template exits when its socket closes
        if self.isolation is None and self.alive:
            self.process.kill()  # still starting (importing torch): it reads its socket only when ready
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.remove_dir()
