# The course's commands. `make book` and `make test` are the two the README promises;
# both create the virtual environment in .venv on first use.
# The newest supported Python on the PATH (3.13, 3.12, then 3.11), unless PYTHON=... is given.
# Each candidate is run, not only looked up: a pyenv shim can exist and still refuse to run.
SUPPORTED_PYTHONS := python3.13 python3.12 python3.11
PYTHON_PROBE = import sys, venv; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in $(SUPPORTED_PYTHONS); do $$p -c '$(PYTHON_PROBE)' >/dev/null 2>&1 && { echo $$p; break; }; done)
endif
# Extra arguments for the first pip install, e.g. a CPU-only build of torch (see the README):
#   make book TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-requirements
SITE   := _build/html/index.html
INSTRUCTOR := _build/instructor

.PHONY: help setup book book-instructor test test-fast lint notebooks student-release gradescope bench gpu-check lock clean

help:
	@echo "make book             set up .venv, execute every notebook, build the HTML book (public edition)"
	@echo "make book-instructor  the instructor edition, with the worked solutions (not to publish)"
	@echo "make test             set up .venv, build the book, run the whole test suite"
	@echo "make test-fast        the inner loop: unit, property and grading tests (no book, no labs, no browser)"
	@echo "make lint             ruff, and the import contract (the layers run one way)"
	@echo "make notebooks        regenerate the paired .ipynb files (with outputs) from their .md sources"
	@echo "make student-release  write the student hand-out to _build/student-release"
	@echo "make gradescope       write the Gradescope autograder zip to _build/gradescope"
	@echo "make bench            print build, grading and solver timings"
	@echo "make gpu-check        run every lab on this machine's GPUs (NCCL), write reports/gpu-check/summary.md"
	@echo "                      (GPU_PYTHON=python3: with the machine's own torch, without building .venv)"

setup: $(STAMP)

$(STAMP): requirements.txt
	@test -n "$(PYTHON)" || { echo "error: no Python 3.11, 3.12 or 3.13 found on the PATH; install one, or run 'make PYTHON=/path/to/python3.12'"; exit 1; }
	@$(PYTHON) -c '$(PYTHON_PROBE)' >/dev/null 2>&1 || { echo "error: $(PYTHON) is not a working Python 3.11, 3.12 or 3.13; run 'make PYTHON=/path/to/python3.12'"; exit 1; }
	@test -x $(PY) || { echo "Creating $(VENV) with $(PYTHON) ($$($(PYTHON) -c 'import platform; print("Python", platform.python_version())'))"; $(PYTHON) -m venv $(VENV); }
	@echo "Installing the pinned requirements into $(VENV) with $$($(PY) -c 'import platform; print("Python", platform.python_version())')."
	@echo "The first run takes a few minutes. On Linux, PyPI's torch brings its CUDA libraries: .venv"
	@echo "grows to about 5.4 GB, against 1.7 GB with torch's CPU build. Without an NVIDIA GPU, use"
	@echo "  make book TORCH_INDEX=https://download.pytorch.org/whl/cpu"
	@$(if $(TORCH_INDEX),$(PY) -m pip install --quiet --disable-pip-version-check --index-url $(TORCH_INDEX) "$$(grep -m1 '^torch==' requirements.txt)")
	@$(PY) -m pip install --quiet --quiet --disable-pip-version-check -r requirements.txt 2>$(VENV)/pip-errors.log || { \
	    pin=$$(sed -n 's/.*No matching distribution found for \([^ ]*\).*/\1/p' $(VENV)/pip-errors.log | head -1); \
	    if [ -n "$$pin" ]; then echo "error: $$pin has no package for $$($(PY) -c 'import platform; print("Python", platform.python_version(), "on", platform.machine())'); use Python 3.11-3.13 (README, 'Supported Pythons')"; \
	    else echo "error: pip could not install requirements.txt; its messages are in $(VENV)/pip-errors.log"; fi; exit 1; }
	@# Make the course's own packages (solutions, labs, sandbox, grading, assignments, autograde, instructor, tests) importable from any
	@# folder, e.g. by notebooks executing inside chapters/.
	@$(PY) -c "import sysconfig, pathlib; pathlib.Path(sysconfig.get_paths()['purelib'], 'course-root.pth').write_text(str(pathlib.Path.cwd()) + '\n')"
	@# Byte-compile the course's packages once: a cold `python -m autograde` then starts in
	@# under half a second even where Python is told not to write bytecode caches.
	@$(PY) -m compileall -q -x '/redteam/' solutions labs sandbox grading assignments autograde instructor tests tools coursefig
	@touch $(STAMP)

# myst-nb's execution cache (_build/.jupyter_cache, shared by both editions) is keyed on a
# notebook's own cells: when the code the notebooks import changes, run them again instead of
# showing the old code's outputs, and render every page of the edition being built again.
CODE_DIGEST = find solutions labs coursefig -type f \( -name '*.py' -o -name '*.toml' -o -name '*.json' \) \
	-not -path '*/__pycache__/*' | LC_ALL=C sort | xargs cat | sha256sum
fresh_outputs = mkdir -p $(1) && $(CODE_DIGEST) > $(1)/.code-now; \
	cmp -s $(1)/.code-now _build/.jupyter_cache.code 2>/dev/null || rm -rf _build/.jupyter_cache; \
	cmp -s $(1)/.code-now $(1)/.code-of-last-build 2>/dev/null || rm -rf $(1)/.doctrees
outputs_built = cp $(1)/.code-now _build/.jupyter_cache.code && mv $(1)/.code-now $(1)/.code-of-last-build

book: $(STAMP)
	@# sphinx-external-toc cannot update a saved Sphinx environment after the table of
	@# contents changes: start the HTML build afresh then (the execution cache is kept).
	@cmp -s book/_toc.yml _build/.toc-of-last-build 2>/dev/null || rm -rf _build/.doctrees _build/html
	@$(call fresh_outputs,_build)
	$(VENV)/bin/jupyter-book build . --toc book/_toc.yml --config _config.yml --warningiserror --keep-going
	@cp book/_toc.yml _build/.toc-of-last-build
	@$(call outputs_built,_build)
	@echo ""
	@echo "The book is built: open $(CURDIR)/$(SITE)"

# The same sources with the worked solutions shown (book/_ext/course_site.py reads
# COURSE_EDITION). It shares the execution cache, so after `make book` nothing re-executes.
book-instructor: $(STAMP)
	@cmp -s book/_toc.yml $(INSTRUCTOR)/.toc-of-last-build 2>/dev/null || rm -rf $(INSTRUCTOR)/_build
	@$(call fresh_outputs,$(INSTRUCTOR)/_build)
	COURSE_EDITION=instructor $(VENV)/bin/jupyter-book build . --toc book/_toc.yml --config _config.yml \
		--warningiserror --keep-going --path-output $(INSTRUCTOR)
	@cp book/_toc.yml $(INSTRUCTOR)/.toc-of-last-build
	@$(call outputs_built,$(INSTRUCTOR)/_build)
	@echo ""
	@echo "The instructor edition is built: open $(CURDIR)/$(INSTRUCTOR)/_build/html/index.html (keep it private)"

test: book
	$(PY) -m pytest

# Tiers 1-2 of the suite (unit and property tests of solutions/, the grading tests, the
# engine's and graders' own tests), without the book, the labs' ranks, notebooks or a browser.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not site" tests --ignore=tests/book --ignore=tests/labs

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

notebooks: $(STAMP)
	$(PY) tools/sync_notebooks.py --execute

student-release: $(STAMP)
	$(PY) -m instructor.release student --out _build/student-release

gradescope: $(STAMP)
	$(PY) -m instructor.release gradescope --out _build/gradescope $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT))

bench: $(STAMP)
	$(PY) benchmarks/bench_build.py
	$(PY) benchmarks/bench_compute_optimal.py
	$(PY) benchmarks/bench_autograde.py
	$(PY) benchmarks/bench_plan.py
	@# Mutation score: single-bug versions of solutions/ and labs/ the tests catch (about 20 min on 2 cores).
	$(PY) tools/mutation.py

# On a machine with CUDA GPUs: every lab with NCCL at world sizes min(N, 2) and 1, one summary.
# Without a GPU it says "no GPU" and exits 0. The check needs only torch, numpy and scipy:
#   make gpu-check GPU_PYTHON=python3     the machine's own Python and torch, no .venv built
#   make gpu-check GPU_CHECK_ARGS="--budget 300 --only ddp fsdp"
GPU_PYTHON ?=
GPU_CHECK_ARGS ?=
gpu-check:
ifeq ($(GPU_PYTHON),)
	@$(MAKE) --no-print-directory setup
	$(PY) -m labs.gpu_check --out reports/gpu-check $(GPU_CHECK_ARGS)
else
	PYTHONPATH=$(CURDIR) $(GPU_PYTHON) -m labs.gpu_check --out reports/gpu-check $(GPU_CHECK_ARGS)
endif

lock: $(STAMP)
	@echo "Edit requirements.in, then regenerate requirements.txt from a fresh venv with 'pip freeze'."

clean:
	rm -rf _build
