"""Suite-wide settings: a non-interactive plotting backend and one thread per process, so that
tests behave the same on a laptop, in CI and on a 2-core machine.

The backend is chosen with ``matplotlib.use`` in this process only: an MPLBACKEND variable
would leak into the kernels nbval starts, and the notebooks' figures would stop displaying."""
import os

import matplotlib

matplotlib.use("Agg")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser):
    """Grade a submission instead of the reference: ``pytest tests/grading --submission PATH``."""
    group = parser.getgroup("grading")
    group.addoption("--submission", action="store", default=None, metavar="PATH",
                    help="grade this submission (.ipynb, .md or .py) instead of solutions/")
    group.addoption("--submission-timeout", action="store", type=float, default=10.0,
                    metavar="SECONDS", help="time limit per call of a submitted function")
