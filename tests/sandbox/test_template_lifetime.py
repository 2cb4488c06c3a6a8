"""A template process (the exercises' worker zygote, the assignments' rank zygote) lives
exactly as long as the grader that uses it: killed with SIGKILL while the template still
imports torch, the grader leaves nothing behind; a template started by a grading thread
that then ends goes on serving the threads that remain."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import alive, children

ROOT = Path(__file__).resolve().parents[2]

STARTS = {
    "worker zygote": "from sandbox.handle import prestart\nprestart()\n",
    "rank zygote": "from sandbox.multirank import prestart\nprestart()\n",
}


@pytest.mark.parametrize("which", sorted(STARTS))
def test_a_grader_killed_while_its_template_starts_leaves_no_template(which):
    grader = subprocess.Popen([sys.executable, "-c", STARTS[which] + "import time\ntime.sleep(60)\n"],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        until = time.monotonic() + 30
        while not (started := children(grader.pid)) and time.monotonic() < until:
            time.sleep(0.01)
        assert started, f"the {which} never started"
        time.sleep(0.3)  # it is importing (torch, for the rank zygote): not yet listening
    finally:
        grader.kill()
        grader.wait()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and any(alive(p) for p in started):
        time.sleep(0.01)
    assert not [p for p in started if alive(p)], f"the {which} outlived its grader by over 1 s"


THREAD_ENDS = """
import os, threading
from sandbox import multirank
first = []
thread = threading.Thread(target=lambda: first.append(multirank.rank_zygote(isolate=False)))
thread.start(); thread.join()
import time; time.sleep(0.5)
again = multirank.rank_zygote(isolate=False)
print(again is first[0], again.alive, again.process.pid == first[0].process.pid)
"""


def test_a_template_started_by_a_thread_that_ends_goes_on_serving():
    done = subprocess.run([sys.executable, "-c", THREAD_ENDS], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]


def test_an_exercises_class_run_starts_no_rank_zygote(tmp_path):
    """Looking up the assignments (to tell a forgotten --assignment) imports their graders
    and starts nothing: an exercises run has no use for torch's template."""
    probe = ("import sandbox.multirank as m\nfrom autograde import classrun\n"
             "from assignments import ASSIGNMENTS\n"
             "for a in sorted(ASSIGNMENTS):\n    classrun.wanted_for(a)\n"
             "print(len(m._zygotes))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0"



STOP_WHILE_STARTING = """
import time
from sandbox import multirank
multirank.prestart()
zygote = next(iter(multirank._zygotes.values()))
time.sleep(0.3)
assert zygote.isolation is None
started = time.monotonic()
multirank.stop_zygotes()
print(round(time.monotonic() - started, 3), zygote.process.poll() is not None)
"""


def test_a_grader_that_stops_while_its_template_starts_does_not_wait_for_it():
    """An interrupted class run stops at once: the rank zygote still importing torch is
    killed, not waited for (it would read its closed socket only once ready)."""
    done = subprocess.run([sys.executable, "-c", STOP_WHILE_STARTING], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    took, gone = done.stdout.split()
    assert gone == "True" and float(took) < 1.0, done.stdout
