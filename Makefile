# The course's commands. `make book` and `make test` are the two the README promises;
# both create the virtual environment in .venv on first use.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-requirements
SITE   := _build/html/index.html

.PHONY: help setup book test notebooks student-release gradescope bench lock clean

help:
	@echo "make book             set up .venv, execute every notebook, build the HTML book"
	@echo "make test             set up .venv, build the book, run the whole test suite"
	@echo "make notebooks        regenerate the paired .ipynb files (with outputs) from their .md sources"
	@echo "make student-release  write the student hand-out to _build/student-release"
	@echo "make gradescope       write the Gradescope autograder zip to _build/gradescope"
	@echo "make bench            print build, grading and solver timings"

setup: $(STAMP)

$(STAMP): requirements.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=/path/to/python3.11'"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "Installing the pinned requirements into $(VENV) (the first run takes a few minutes)"
	$(PY) -m pip install --quiet --quiet --disable-pip-version-check -r requirements.txt
	@# Make the course's own packages (solutions, autograde, labs, tests) importable from any
	@# folder, e.g. by notebooks executing inside chapters/.
	@$(PY) -c "import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()['purelib'], 'course-root.pth').write_text(str(pathlib.Path.cwd()) + '\n')"
	@# Byte-compile the course's packages once: a cold `python -m autograde` then starts in
	@# under half a second even where Python is told not to write bytecode caches.
	@$(PY) -m compileall -q -x '/redteam/' solutions autograde tests labs tools coursefig
	@touch $(STAMP)

book: $(STAMP)
	@# sphinx-external-toc cannot update a saved Sphinx environment after the table of
	@# contents changes: start the HTML build afresh then (the execution cache is kept).
	@cmp -s book/_toc.yml _build/.toc-of-last-build 2>/dev/null || rm -rf _build/.doctrees _build/html
	$(VENV)/bin/jupyter-book build . --toc book/_toc.yml --config _config.yml --warningiserror --keep-going
	@cp book/_toc.yml _build/.toc-of-last-build
	@echo ""
	@echo "The book is built: open $(CURDIR)/$(SITE)"

test: book
	$(PY) -m pytest

notebooks: $(STAMP)
	$(PY) tools/sync_notebooks.py --execute

student-release: $(STAMP)
	$(PY) -m autograde.release student --out _build/student-release

gradescope: $(STAMP)
	$(PY) -m autograde.release gradescope --out _build/gradescope

bench: $(STAMP)
	$(PY) benchmarks/bench_build.py
	$(PY) benchmarks/bench_compute_optimal.py
	$(PY) benchmarks/bench_autograde.py
	$(PY) benchmarks/bench_plan.py

lock: $(STAMP)
	@echo "Edit requirements.in, then regenerate requirements.txt from a fresh venv with 'pip freeze'."

clean:
	rm -rf _build
