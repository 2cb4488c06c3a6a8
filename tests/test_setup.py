"""Where learners run the course: which Python `make` picks, and the Binder configuration.

The Makefile uses the newest of python3.13, python3.12 and python3.11 that actually runs (a
pyenv shim can be on the PATH and still refuse to run), unless PYTHON=... is given. These tests
run `make -n` against a PATH of stub interpreters, so they need no second Python.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

WORKS = "#!/bin/sh\nexit 0\n"          # answers the Makefile's version probe with "yes"
REFUSES = "#!/bin/sh\necho 'pyenv: command not found' >&2\nexit 127\n"   # like an inactive pyenv shim
TOO_NEW = "#!/bin/sh\nexit 1\n"        # runs, but the probe finds a version outside 3.11-3.13


@pytest.fixture
def course(tmp_path):
    """A folder with the course's Makefile and requirements, and an empty bin/ for stubs."""
    if MAKE is None:
        pytest.fail("make is required") if IN_CI else pytest.skip("make is not installed")
    for name in ("Makefile", "requirements.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "bin").mkdir()
    return tmp_path


def stub(course: Path, name: str, body: str) -> None:
    path = course / "bin" / name
    path.write_text(body)
    path.chmod(0o755)


def make(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": str(course / "bin"), "HOME": str(course)}
    return subprocess.run([MAKE, "--no-print-directory", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=60)


def chosen(course: Path, *args: str) -> str:
    out = make(course, "-n", "book", *args)
    assert out.returncode == 0, out.stderr
    venv_lines = [line for line in out.stdout.splitlines() if "-m venv .venv" in line]
    assert venv_lines, out.stdout
    match = re.search(r"(\S+) -m venv \.venv", venv_lines[0])
    return match.group(1)


def test_only_python312_is_picked(course):
    stub(course, "python3.12", WORKS)
    assert chosen(course) == "python3.12"


def test_only_python313_is_picked(course):
    stub(course, "python3.13", WORKS)
    assert chosen(course) == "python3.13"


def test_newest_working_python_wins(course):
    for name in ("python3.11", "python3.12", "python3.13"):
        stub(course, name, WORKS)
    assert chosen(course) == "python3.13"


def test_a_shim_that_refuses_to_run_is_passed_over(course):
    stub(course, "python3.13", REFUSES)
    stub(course, "python3.12", TOO_NEW)
    stub(course, "python3.11", WORKS)
    assert chosen(course) == "python3.11"


def test_python_given_on_the_command_line_wins(course):
    stub(course, "python3.13", WORKS)
    assert chosen(course, "PYTHON=/opt/py/bin/python3.12") == "/opt/py/bin/python3.12"


def test_no_supported_python_fails_in_one_line(course):
    stub(course, "python3.13", REFUSES)
    out = make(course, "setup")
    assert out.returncode != 0
    message = (out.stdout + out.stderr).strip().splitlines()
    assert len(message) <= 2, message      # make adds its own "Error 1" line
    assert message[0].startswith("error: no Python 3.11, 3.12 or 3.13 found on the PATH")


def test_supported_range_is_stated_once_and_agrees():
    """pyproject's requires-python, the Makefile's probe and the README name the same range."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'requires-python = ">=3\.11,<3\.14"', pyproject)
    makefile = (ROOT / "Makefile").read_text()
    assert "SUPPORTED_PYTHONS := python3.13 python3.12 python3.11" in makefile
    assert makefile.count("(3, 11) <= sys.version_info[:2] <= (3, 13)") == 1
    assert makefile.count("$(PYTHON_PROBE)") == 2
    readme = (ROOT / "README.md").read_text()
    assert "Python 3.11, 3.12 or 3.13" in readme


# --- Binder ---------------------------------------------------------------------------------

def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        assert version, f"{path.name}: '{line}' is not pinned with =="
        pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_binder_installs_the_cpu_build_of_the_same_pins():
    binder = ROOT / "binder" / "requirements.txt"
    pins = _pins(binder)
    main = _pins(ROOT / "requirements.txt")
    assert pins["torch"] == main["torch"] + "+cpu", "Binder must get torch's CPU build"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in binder.read_text()
    for name, version in pins.items():
        if name != "torch":
            assert main.get(name) == version, f"binder pins {name}=={version}, requirements.txt {main.get(name)}"
    # What the notebooks import must be installed there.
    for needed in ("numpy", "matplotlib", "myst-nb", "ipykernel"):
        assert needed in pins
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert re.fullmatch(r"python-3\.1[123]", runtime), runtime


def _config():
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def _course_site():
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    return importlib.import_module("course_site")


def test_the_placeholder_address_is_told_from_a_real_one():
    from types import SimpleNamespace

    site = _course_site()
    placeholder = SimpleNamespace(html_theme_options={"repository_url": site.PLACEHOLDER_REPOSITORY + "/"})
    real = SimpleNamespace(html_theme_options={"repository_url": "https://github.com/someone/course"})
    assert site.repository_is_placeholder(placeholder) and not site.repository_is_placeholder(real)


def test_binder_buttons_open_the_page_s_own_notebook():
    """Every notebook page's Binder button opens that page's .ipynb in the course repository;
    while the address is the placeholder, no page offers to launch anything, and each lab says
    where its Colab and Kaggle buttons will be (book/_ext/course_site.py, item 9)."""
    site = ROOT / "_build" / "html"
    if not (site / "index.html").exists():
        message = "the book is not built (run `make book`)"
        pytest.fail(message) if IN_CI else pytest.skip(message)
    config = _config()
    if config["repository"]["url"].rstrip("/") == _course_site().PLACEHOLDER_REPOSITORY:
        pages = sorted(site.glob("*/*.html"))
        launching = [p.name for p in pages
                     if re.search(r'href="https://(mybinder\.org|colab\.research\.google\.com|kaggle\.com)/', p.read_text())]
        assert not launching, f"pages that launch from a repository that does not exist yet: {launching}"
        noted = [p.name for p in pages if 'class="launch-unpublished"' in p.read_text()]
        assert len(noted) >= 5, f"only {noted} say where their launch buttons will be"
        return
    owner_repo = urlparse(config["repository"]["url"]).path.strip("/")
    branch = config["repository"].get("branch", "main")
    checked = 0
    for page in sorted(site.glob("*/*.html")):
        source = page.relative_to(site).with_suffix(".ipynb")
        links = re.findall(r'href="(https://mybinder\.org/[^"]+)"', page.read_text())
        if not (ROOT / source).exists():
            assert not links, f"{page.name} has a Binder button but no notebook"
            continue
        assert len(set(links)) == 1, f"{source}: expected one Binder button, found {links}"
        url = urlparse(links[0].replace("&amp;", "&"))
        assert url.path == f"/v2/gh/{owner_repo}/{branch}", url.path
        assert parse_qs(url.query)["urlpath"] == [f"tree/{source.as_posix()}"]
        checked += 1
    assert checked >= 10, f"only {checked} notebook pages carry a Binder button"
