"""Generate the student version of an exercises notebook from its master (nbgrader style).

    python instructor/student_notebook.py chapters/09-exercises.md --out DIR

The master holds each worked solution between two marker lines inside a code cell:

    def chinchilla_loss(N, D):
        ### BEGIN SOLUTION
        return ...
        ### END SOLUTION

The student version replaces every such region by one ``raise NotImplementedError(...)``
line at the marker's indentation, clears all outputs, and writes ``DIR/<name>.ipynb`` and
``DIR/<name>.md``. It also makes the notebook read well outside the book:

* cells that still call an exercise function are tagged ``raises-exception``, so "Run all"
  goes on to the check cells, which report "not implemented yet" instead of stopping;
* the template cells lose ``hide-input`` (students must see them);
* MyST-only markup becomes plain Markdown: dropdown admonitions become ``<details>``
  blocks, other admonitions become quotes, ``{cite}``/``{doc}`` roles become text;
* the setup cell is the master's own (one source): it finds the course next to the notebook,
  or, on Colab, Kaggle or for a notebook uploaded alone, clones the release at its version
  (``tests/instructor/test_release_kit.py`` runs it in an empty folder with a bare Python).
"""
from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import jupytext
import nbformat

if not __package__:  # run as a script (python instructor/student_notebook.py): the course's root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grading import EXERCISES  # noqa: E402

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
EXERCISE_FUNCTIONS = tuple(e.function for e in EXERCISES)
_CALLS = re.compile(r"(?<!def )\b(" + "|".join(EXERCISE_FUNCTIONS) + r")\s*\(")

CONFIG = Path(__file__).resolve().parents[1] / "_config.yml"


def repository_url(config: Path = CONFIG) -> str:
    """The course's public repository (``repository.url`` in the book's ``_config.yml``),
    which students clone; the setup cell fetches the grading package from it on Colab."""
    import yaml

    try:
        url = yaml.safe_load(config.read_text(encoding="utf-8"))["repository"]["url"]
    except (OSError, KeyError, TypeError) as exc:
        raise ValueError(f"config: no repository.url in {config} ({exc})") from None
    if not isinstance(url, str) or not url.startswith("https://"):
        raise ValueError(f"config: repository.url in {config} must be an https URL, got {url!r}")
    return url


def repository_version(config: Path = CONFIG) -> str:
    """The release's version that setup cells clone (``repository.branch``: a tag or branch)."""
    import yaml

    try:
        return str(yaml.safe_load(config.read_text(encoding="utf-8"))["repository"]["branch"])
    except (OSError, KeyError, TypeError) as exc:
        raise ValueError(f"config: no repository.branch in {config} ({exc})") from None


def _check_setup_cell(source: str) -> None:
    """The master's setup cell clones the configured repository at the configured version."""
    url, version = repository_url(), repository_version()
    wanted = f'COURSE_URL, COURSE_VERSION = "{url}", "{version}"'
    if wanted not in source:
        raise ValueError(f"setup cell: it must say {wanted} (the repository in _config.yml)")


class MarkerError(ValueError):
    """The solution markers of a cell are unbalanced or nested."""


def strip_solutions(source: str, where: str = "cell") -> tuple[str, int, bool]:
    """Replace each marked region by a ``raise NotImplementedError`` line.

    Returns (new source, number of regions, whether any region was at top level).
    """
    out: list[str] = []
    inside = False
    regions = 0
    top_level = False
    function = None
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        match = re.match(r"\s*def\s+(\w+)\s*\(", line)
        if match and not inside:
            function = match.group(1)
        if stripped == BEGIN:
            if inside:
                raise MarkerError(f"{where}, line {number}: {BEGIN} inside another region")
            inside = True
            regions += 1
            indent = line[: len(line) - len(line.lstrip())]
            top_level = top_level or indent == ""
            what = f"`{function}`" if indent and function else "this part of the exercise"
            out.append(f'{indent}raise NotImplementedError("Implement {what}: replace this line with your code.")')
        elif stripped == END:
            if not inside:
                raise MarkerError(f"{where}, line {number}: {END} without {BEGIN}")
            inside = False
        elif BEGIN in line or END in line:
            raise MarkerError(f"{where}, line {number}: a marker must be alone on its line")
        elif not inside:
            out.append(line)
    if inside:
        raise MarkerError(f"{where}: {BEGIN} without {END}")
    return "\n".join(out), regions, top_level


_ADMONITION = re.compile(
    r"^(?P<fence>:{3,})\{(?P<kind>[\w-]+)\}[ \t]*(?P<title>[^\n]*)\n"
    r"(?P<options>(?::[\w-]+:[^\n]*\n)*)"
    r"(?P<body>.*?)\n(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def _admonition(match: re.Match) -> str:
    kind, title = match.group("kind"), match.group("title").strip()
    options = match.group("options")
    body = match.group("body").strip("\n")
    if kind != "admonition":
        title = title or kind.capitalize()
    if ":class: dropdown" in options:
        return f"<details>\n<summary>{title}</summary>\n\n{body}\n\n</details>"
    quoted = "\n".join("> " + line if line else ">" for line in body.splitlines())
    if title and title[-1] not in ".?!:":
        title += "."
    return f"> **{title}**\n>\n{quoted}"


def plain_markdown(text: str) -> str:
    """MyST-only markup -> Markdown that Jupyter renders."""
    text = _ADMONITION.sub(_admonition, text)
    text = re.sub(r"^\([\w-]+\)=\s*\n", "", text, flags=re.MULTILINE)  # targets
    text = re.sub(r"\{doc\}`([^`<]+?)\s*<[^`>]+>`", r"*\1* (in the book)", text)
    text = re.sub(r"\{doc\}`([^`]+)`", r"*\1* (in the book)", text)
    text = re.sub(r"\{cite(?::\w+)?\}`([^`]+)`", lambda m: "[" + "; ".join(
        k.strip() for k in m.group(1).split(",")) + "]", text)
    text = re.sub(r"\{(?:ref|numref|eq)\}`([^`<]+?)\s*<[^`>]+>`", r"\1", text)
    text = re.sub(r"\{(?:ref|numref|eq)\}`([^`]+)`", r"\1", text)
    return text


def student_notebook(master: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student version of a master notebook (a new object; the master is not changed)."""
    nb = copy.deepcopy(master)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            cell.source = plain_markdown(cell.source)
            continue
        if cell.cell_type != "code":
            continue
        tags = list(cell.metadata.get("tags", []))
        if "remove-cell" in tags and "Colab/Binder" in cell.source:
            _check_setup_cell(cell.source)  # kept as it is: it runs anywhere
        source, regions, top_level = strip_solutions(cell.source, f"cell {index}")
        cell.source = source
        if regions:
            tags = [t for t in tags if t != "hide-input"]
        if (top_level or _CALLS.search(source)) and "raises-exception" not in tags:
            tags.append("raises-exception")
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    return nb


def write_student_version(master_path: Path, out_dir: Path) -> tuple[Path, Path]:
    master = jupytext.read(master_path)
    nb = student_notebook(master)
    out_dir.mkdir(parents=True, exist_ok=True)
    ipynb = out_dir / (master_path.stem + ".ipynb")
    md = out_dir / (master_path.stem + ".md")
    nbformat.write(nb, ipynb)
    jupytext.write(nb, md, fmt="md:myst")
    return ipynb, md


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("master", type=Path, help="the master notebook (MyST .md or .ipynb)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the student version")
    args = parser.parse_args(argv)
    try:
        for path in write_student_version(args.master, args.out):
            print(f"wrote {path}")
    except MarkerError as err:
        print(f"error: {args.master}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
