"""The student's kit as a student meets it: the exercises notebook alone on Colab, Kaggle or
uploaded into an empty folder; the kit's own requirements; and what the kit must not hold
(no line of a reference solution, no route through the shipped library to a graded answer).

The only stand-in is for the network: git's ``url.<base>.insteadOf`` (set through
``GIT_CONFIG_*`` variables) points the course's address at a local bare repository holding
the student release at its version, and pip is given an empty local index. Everything else
(the notebook's own setup cell, git, a fresh virtual environment, the released library) is
the real thing.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

from autograde import release

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
URL, VERSION = CONFIG["url"], str(CONFIG["branch"])
NOTEBOOK = "chapters/09-exercises.ipynb"


def _git(*args, cwd=None, env=None):
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """The student release, built (and verified) as `make student-release` builds it."""
    out = tmp_path_factory.mktemp("kit") / "student"
    release.build_student(out)
    return out


@pytest.fixture(scope="module")
def remote(kit, tmp_path_factory):
    """A bare repository holding the release, tagged with the configured version: what the
    course's public address serves. Returns (path, commit)."""
    base = tmp_path_factory.mktemp("remote")
    bare = base / "course.git"
    env = {**_hermetic_env(base), "GIT_AUTHOR_NAME": "course", "GIT_AUTHOR_EMAIL": "c@example.org",
           "GIT_COMMITTER_NAME": "course", "GIT_COMMITTER_EMAIL": "c@example.org"}
    _git("init", "--quiet", "--bare", str(bare), env=env)
    tree = ["--git-dir", str(bare), "--work-tree", str(kit)]
    _git(*tree, "add", "-A", env=env)
    _git(*tree, "commit", "--quiet", "-m", "student release", env=env)
    _git("--git-dir", str(bare), "tag", VERSION, env=env)
    return bare, _git("--git-dir", str(bare), "rev-parse", "HEAD", env=env)


def _hermetic_env(home: Path, **extra) -> dict:
    """No inherited Python or git settings: PATH (for git), a fresh HOME, no system or
    global git configuration."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **extra}


def _network_double(remote: Path) -> dict:
    """git fetches the course's address from the local bare repository instead."""
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.file://{remote}.insteadOf",
            "GIT_CONFIG_VALUE_0": URL}


def _bare_python(where: Path, site: list[Path] = ()) -> Path:
    """A throwaway virtual environment without pip and without the course. ``site``: folders
    to add to its path (the third-party packages a platform such as Colab preinstalls)."""
    venv.EnvBuilder(with_pip=False, clear=True).create(where)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if site:
        Path(purelib, "platform-packages.pth").write_text("".join(f"{p}\n" for p in site))
    return python


def _dev_site_packages() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"])


def _code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _alone(kit: Path, folder: Path) -> Path:
    """The exercises notebook, copied on its own into an empty folder (an upload)."""
    folder.mkdir()
    shutil.copy(kit / NOTEBOOK, folder / Path(NOTEBOOK).name)
    return folder / Path(NOTEBOOK).name


def test_the_released_notebook_has_the_master_s_setup_cell(kit):
    import jupytext

    master = [c.source for c in jupytext.read(ROOT / "chapters" / "09-exercises.md").cells
              if c.cell_type == "code"][0]
    student = _code_cells(kit / NOTEBOOK)[0]
    assert student == master and "git" in student and f'"{URL}", "{VERSION}"' in student


def test_alone_on_a_platform_python_the_setup_cell_clones_the_release_and_the_notebook_runs(
        kit, remote, tmp_path):
    """Colab or Kaggle: numpy and matplotlib preinstalled, no course. The setup cell clones the
    release at its version next to the notebook; the next cells (the grading package's table
    of exercises) then run. Run again (a restarted kernel), it clones nothing."""
    bare, commit = remote
    notebook = _alone(kit, tmp_path / "upload")
    python = _bare_python(tmp_path / "platform-python", site=[_dev_site_packages()])
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('coursefig'), u.find_spec('numpy') is not None)"],
                           capture_output=True, text=True, cwd=notebook.parent)
    assert probe.stdout.split() == ["None", "True"], probe  # the course is out of reach
    cells = _code_cells(notebook)
    script = "\n".join(cells[:3])  # setup, imports, the exercises and their points
    env = _hermetic_env(tmp_path, MPLBACKEND="Agg", **_network_double(bare))
    done = subprocess.run([str(python), "-c", script], cwd=notebook.parent, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    clone = notebook.parent / "course"
    assert _git("rev-parse", "HEAD", cwd=clone, env=env) == commit
    assert sorted(p.name for p in notebook.parent.iterdir()) == ["09-exercises.ipynb", "course"]
    for title in ("Exercise 1", "Exercise 2", "Exercise 3", "Exercise 4"):
        assert title in done.stdout, done.stdout
    # A restarted kernel: the clone is found, the network is not needed.
    offline = _hermetic_env(tmp_path, MPLBACKEND="Agg")
    again = subprocess.run([str(python), "-c", script], cwd=notebook.parent, env=offline,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == done.stdout, again.stderr[-2000:]


def test_alone_on_a_bare_python_the_setup_cell_passes_its_clone_step(kit, remote, tmp_path):
    """A Python with none of the course's packages (no numpy, no matplotlib): the clone step
    needs none of them and completes; the cell then asks pip for exactly what is missing (here
    pip's index is an empty local folder, so that request is the end of the run)."""
    bare, commit = remote
    notebook = _alone(kit, tmp_path / "upload")
    only_pip = tmp_path / "only-pip"
    only_pip.mkdir()
    (only_pip / "pip").symlink_to(_dev_site_packages() / "pip")
    python = _bare_python(tmp_path / "bare-python", site=[only_pip])
    wheels = tmp_path / "no-wheels"
    wheels.mkdir()
    env = _hermetic_env(tmp_path, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
                        PIP_DISABLE_PIP_VERSION_CHECK="1", **_network_double(bare))
    setup = _code_cells(notebook)[0]
    done = subprocess.run([str(python), "-c", setup], cwd=notebook.parent, env=env,
                          capture_output=True, text=True, timeout=120)
    clone = notebook.parent / "course"
    assert _git("rev-parse", "HEAD", cwd=clone, env=env) == commit, done.stderr[-2000:]
    assert (clone / "coursefig").is_dir() and (clone / "tests" / "grading").is_dir()
    assert done.returncode != 0
    assert "No matching distribution found for numpy" in done.stderr, done.stderr[-2000:]
    assert "CalledProcessError" in done.stderr and "'matplotlib']" in done.stderr
