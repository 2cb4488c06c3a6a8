"""Suite-wide settings: a non-interactive plotting backend and one thread per process, so that
tests behave the same on a laptop, in CI and on a 2-core machine.

The backend is chosen with ``matplotlib.use`` in this process only: an MPLBACKEND variable
would leak into the kernels nbval starts, and the notebooks' figures would stop displaying."""
import os

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_addoption(parser):
    """Grade a submission instead of the reference: ``pytest tests/grading --submission PATH``."""
    group = parser.getgroup("grading")
    group.addoption("--submission", action="store", default=None, metavar="PATH",
                    help="grade this submission (.ipynb, .md or .py) instead of solutions/")
    group.addoption("--submission-timeout", action="store", type=float, default=10.0,
                    metavar="SECONDS", help="time limit per call of a submitted function")


IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
#: Notebooks kept as test data (a student's notebook from an earlier release), not as pages.
collect_ignore_glob = ["assets/*.ipynb"]


def unavailable(reason: str):
    """A check that cannot run here: a skip with the reason, but a failure under CI."""
    if IN_CI:
        pytest.fail(f"{reason} (required under CI)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def server():
    """The built book (``make book``) on a loopback HTTP server: its base URL."""
    from tools.browser import ROOT, SITE, serve

    if not (SITE / "index.html").exists():
        unavailable(f"no built site at {SITE.relative_to(ROOT)}: run `make book` first")
    with serve(SITE) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium, driven by Playwright."""
    from tools.browser import BrowserUnavailable, chromium

    try:
        with chromium() as opened:
            yield opened
    except BrowserUnavailable as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def site_visits():
    """Every page of the built book at a phone's and a desktop's width, visited once for the
    whole suite (tests/site_visits.py): ``(the server's base URL, {(path, width): found})``."""
    from tests.site_visits import visit_every_page
    from tools.browser import ROOT, SITE, BrowserUnavailable, chromium, serve

    if not (SITE / "index.html").exists():
        unavailable(f"no built site at {SITE.relative_to(ROOT)}: run `make book` first")
    with serve(SITE) as url:
        try:
            with chromium() as opened:
                found = visit_every_page(opened, url)
        except BrowserUnavailable as exc:
            unavailable(str(exc))
        yield url, found
