"""The in-sandbox runtime: what a worker does once its walls stand.

It runs the submission's units in one namespace and answers the grader's calls
(:func:`serve`), sending back only plain data (the converter of :mod:`sandbox.plain`,
compiled once in the zygote by :func:`install_runtime`). Printed text is kept apart and
never sent. Everything here runs beside student code, which may rewrite any of it: the
grader trusts only frames that parse strictly (:mod:`sandbox.protocol`).
"""
from __future__ import annotations

import builtins
import io
import os
import platform
import sys
import traceback
import types

from .calling import call_by_names
from .frames import read_frame, write_frame
from .isolation import WALLS

class CappedOutput(io.TextIOBase):
    """Where the student's ``print`` goes: counted, kept up to a few kilobytes, never sent
    on the protocol channel (printed text is never evidence of anything)."""

    def __init__(self, cap: int = 4096):
        self.cap, self.kept, self.total = cap, [], 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        if self.total < self.cap:
            self.kept.append(text[: self.cap - self.total])
        self.total += len(text)
        return len(text)


def builtin_exception_name(exc: BaseException) -> str:
    """The most derived built-in exception class of ``exc`` (a student's
    ``class BadInput(ValueError)`` reports ``ValueError``)."""
    try:
        for klass in type(exc).__mro__:
            if getattr(builtins, getattr(klass, "__name__", ""), None) is klass:
                return klass.__name__
    except Exception:
        pass
    return "Exception"


def describe(exc: BaseException, filenames) -> dict:
    """A student-facing description of an exception raised by their code."""
    try:
        name = str(type(exc).__name__)
    except Exception:
        name = "Exception"
    try:
        text = str(exc)
    except BaseException:
        text = ""
    text = text.strip().replace("\n", " ")
    if len(text) > 300:
        text = text[:300] + "..."
    where = None
    try:
        for frame in traceback.extract_tb(exc.__traceback__):
            if frame.filename in filenames:
                where = {"file": frame.filename, "line": frame.lineno}
    except Exception:
        pass
    return {"exception": name, "exception_type": builtin_exception_name(exc),
            "message": text, "where": where}


def to_argument(value, np):
    """JSON argument -> what the student's function receives: lists become float arrays."""
    if type(value) is list:
        return np.asarray(value, dtype=np.float64)
    return value


def install_runtime(cfg) -> dict:
    """What every worker's serving loop needs, built once in the zygote: numpy, the
    plain-data converter, and stand-ins for plotting libraries."""
    import numpy as np

    plain = {"__name__": "autograde_plain"}
    exec(compile(cfg["plain_source"], "plain.py", "exec"), plain)

    # A cell that draws a figure beside an exercise runs, draws nothing, and the exercise
    # is still graded.
    class Silent:
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return self

        def __call__(self, *args, **kwargs):
            return self

        def __getitem__(self, key):
            return self

        def __iter__(self):
            return iter(())

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    silent = Silent()

    def subplots(nrows=1, ncols=1, *args, squeeze=True, **kwargs):
        """Like matplotlib's: (figure, axes), axes shaped (nrows, ncols) and squeezed."""
        axes = np.empty((int(nrows), int(ncols)), dtype=object)
        axes.fill(silent)
        if squeeze:
            axes = axes.item() if axes.size == 1 else axes.reshape(-1) if 1 in axes.shape else axes
        return silent, axes

    for name in cfg["stub_modules"]:
        module = types.ModuleType(name)
        module.__path__ = []  # a package, so "import matplotlib.pyplot" works
        module.__getattr__ = lambda attr: subplots if attr == "subplots" else silent
        sys.modules[name] = module
    for name in cfg["stub_modules"]:
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, sys.modules[name])
    return {"np": np, "to_plain": plain["to_plain"], "NotPlainData": plain["NotPlainData"]}


def compile_unit(source: str, filename: str, line: int):
    """Compile a unit whose first line is line ``line`` of the student's file, so that
    tracebacks give the file's own line numbers (the grader sends the unit unpadded: padding
    would cost the square of a long file's line count). A code object's line table is
    relative to its first line, so moving the first lines moves every line."""
    code = compile(source, filename, "exec", dont_inherit=True)
    return _shift_lines(code, line - 1) if type(line) is int and line > 1 else code


def _shift_lines(code, by: int):
    consts = tuple(_shift_lines(c, by) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_firstlineno=code.co_firstlineno + by, co_consts=consts)


def serve(runtime, job, mode: str) -> None:
    """Answer the grader's requests until it closes the pipe."""
    request_fd, response_fd = job["request_fd"], job["response_fd"]
    np, to_plain, NotPlainData = runtime["np"], runtime["to_plain"], runtime["NotPlainData"]
    namespace = {"__name__": "submission", "__builtins__": builtins,
                 "__file__": os.path.join(os.getcwd(), job["submission_name"]),
                 # The notebook's check cells call self_check(...); here it does nothing.
                 "self_check": lambda *args, **kwargs: None}
    sys.argv = [namespace["__file__"]]  # no host paths, no pipe numbers handed out
    output = CappedOutput()
    sys.stdout = sys.stderr = output
    exit_now = os._exit  # student code may replace os._exit; the loop keeps the real one
    filenames = set()
    server = os.getpid()
    write_frame(response_fd, {"op": "ready", "isolation": mode, "walls": dict(WALLS),
                              "numpy": np.__version__, "python": platform.python_version()})
    while True:
        try:
            request = read_frame(request_fd)
        except (EOFError, OSError, ValueError):
            exit_now(0)
        reply = {"id": request.get("id")}
        if request.get("op") == "exec":
            filenames.add(request["filename"])
            try:
                code = compile_unit(request["source"], request["filename"], request.get("line", 1))
                exec(code, namespace)
                reply["ok"] = True
            except BaseException as exc:  # SystemExit, KeyboardInterrupt... cost one unit
                reply.update(ok=False, **describe(exc, filenames))
        elif request.get("op") == "call":
            name = request["function"]
            function = namespace.get(name)
            if not callable(function):
                reply.update(ok=False, missing=True,
                             message="not defined" if function is None else "not a function")
            else:
                try:
                    args = [to_argument(a, np) for a in request["args"]]
                    names = request.get("names")
                    value = call_by_names(function, args, names if isinstance(names, list)
                                          and all(isinstance(n, str) for n in names) else None)
                except BaseException as exc:
                    reply.update(ok=False, **describe(exc, filenames))
                else:
                    try:
                        reply.update(ok=True, value=to_plain(value))
                    except NotPlainData as exc:
                        hint = " (did you forget `return`?)" if value is None else ""
                        reply.update(ok=False, not_plain=True, message=str(exc) + hint)
                    except BaseException as exc:
                        reply.update(ok=False, not_plain=True,
                                     message="returned a value that could not be read: "
                                     + describe(exc, filenames)["exception"])
        else:
            reply.update(ok=False, message="unknown request")
        if os.getpid() != server:
            # A process the student's code forked has returned into this loop: it must not
            # answer (or read) the grader's requests.
            exit_now(0)
        try:
            write_frame(response_fd, reply)
        except (ValueError, TypeError, RecursionError):
            write_frame(response_fd, {"id": reply["id"], "ok": False, "not_plain": True,
                                      "message": "returned a value that cannot be sent back"})

