"""The course's public home is one setting: ``repository.url`` (and the release version,
``repository.branch``) in ``_config.yml``. The launch buttons read it from there; everything
else that names the repository (the README's and the landing page's clone commands, the labs'
Colab and Kaggle badges, every notebook's setup cell, the student notebook's setup cell) must
agree with it, so that changing the setting and running this test finds every place to change.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
URL, VERSION = CONFIG["url"].rstrip("/"), str(CONFIG["branch"])

GITHUB = r"https://github\.com/[\w.-]+/[\w.-]+?"
PATTERNS = {  # what names the course's repository: (address, version or None) in groups 1, 2
    "git clone --branch": re.compile(rf"git clone [^\n]*?--branch ([\w.-]+) ({GITHUB})(?:\.git)?\s"),
    "git clone": re.compile(rf"git\"?,? .*?\bclone\b(?![^\n]*--branch [\w.-]+ )[^\n]*?({GITHUB})(?:\.git)?[\s\"']"),
    "COURSE_URL": re.compile(rf"COURSE_URL\b.*?=\s*\"({GITHUB})\""),
    "Colab badge": re.compile(r"colab\.research\.google\.com/github/([\w.-]+/[\w.-]+)/blob/([\w.-]+)/"),
    "Kaggle badge": re.compile(rf"kaggle\.com/kernels/welcome\?src=({GITHUB})/blob/([\w.-]+)/"),
}
SUFFIXES = {".md", ".py", ".yml", ".yaml", ".toml", ".cfg", ".txt", ".sh"}


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = [ROOT / p for p in out.decode().split("\0") if p]
    return [f for f in files if f.suffix in SUFFIXES and f.is_file() and f.name != Path(__file__).name]


def mentions(text: str) -> list[tuple[str, str, str | None]]:
    """(kind, address, version or None) for each place that names a course repository."""
    found = []
    for kind, pattern in PATTERNS.items():
        for m in pattern.finditer(text):
            address, version = m.group(1), (m.group(2) if pattern.groups > 1 else None)
            if kind == "git clone --branch":
                address, version = version, address
            if not address.startswith("https://"):
                address = "https://github.com/" + address
            found.append((kind, address.removesuffix(".git"), version))
    return found


def test_mentions_are_found():
    """The patterns catch each form (a pattern that matches nothing would check nothing)."""
    text = (
        'git clone https://github.com/a/b.git && cd b\n'
        'git clone --branch v1 https://github.com/k/l.git\n'
        'subprocess.run(["git", "clone", "--depth", "1", "https://github.com/c/d", "course"])\n'
        'COURSE_URL, COURSE_VERSION = "https://github.com/e/f", "v2"\n'
        '[x](https://colab.research.google.com/github/g/h/blob/v3/labs/x.ipynb)\n'
        '[y](https://kaggle.com/kernels/welcome?src=https://github.com/i/j/blob/v4/labs/x.ipynb)\n'
    )
    assert mentions(text) == [
        ("git clone --branch", "https://github.com/k/l", "v1"),
        ("git clone", "https://github.com/a/b", None),
        ("git clone", "https://github.com/c/d", None),
        ("COURSE_URL", "https://github.com/e/f", None),
        ("Colab badge", "https://github.com/g/h", "v3"),
        ("Kaggle badge", "https://github.com/i/j", "v4"),
    ]


def test_every_mention_agrees_with_the_config():
    wrong, count = [], 0
    for path in tracked_text_files():
        for kind, address, version in mentions(path.read_text(encoding="utf-8", errors="replace")):
            count += 1
            if address != URL or (version is not None and version != VERSION):
                wrong.append(f"{path.relative_to(ROOT)}: {kind} names {address}"
                             + (f" at {version}" if version else ""))
    assert count >= 10, f"only {count} mentions of the repository found: the patterns have drifted"
    assert not wrong, f"_config.yml says {URL} at {VERSION}, but:\n  " + "\n  ".join(wrong)


def notebooks() -> list[Path]:
    toc = (ROOT / "book" / "_toc.yml").read_text()
    files = [ROOT / (f + ".md") for f in re.findall(r"file:\s*(\S+)", toc)]
    return [f for f in files if f.exists() and f.read_text().startswith("---\njupytext:")]


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_setup_cell_fetches_the_release_at_its_version(path):
    """A notebook that fetches the course outside the course folder takes the student
    release, at the configured version, and tests for a module only the course has."""
    cells = [c for c in jupytext.read(path).cells if c.cell_type == "code"]
    setup = cells[0].source if cells else ""
    if "clone" not in setup:
        pytest.skip("this notebook fetches nothing")
    assert f'COURSE_URL, COURSE_VERSION = "{URL}", "{VERSION}"' in setup, setup
    assert '"--branch", COURSE_VERSION' in setup, "clone the release at its version, not whatever is newest"
    assert 'find_spec("coursefig")' in setup, "test for the course's own module, not a generic name"


def test_a_setup_cell_that_cannot_fetch_the_course_says_what_to_do(tmp_path):
    """A notebook alone in an empty folder (Colab without the network, or a course address that
    does not answer): the setup cell stops with one sentence saying what to do, not a traceback."""
    import sys

    setup = [c for c in jupytext.read(ROOT / "labs" / "01-collectives.md").cells if c.cell_type == "code"][0].source
    env = {"PATH": "/usr/bin:/bin", "GIT_ALLOW_PROTOCOL": "file", "HOME": str(tmp_path)}  # git refuses https at once
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", setup.split("\nimport coursefig")[0]], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "Could not fetch the course from" in proc.stderr and "./course" in proc.stderr
