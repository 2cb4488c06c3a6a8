"""Suite-wide settings: a non-interactive plotting backend and one thread per process, so that
tests behave the same on a laptop, in CI and on a 2-core machine."""
import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OMP_NUM_THREADS", "1")
