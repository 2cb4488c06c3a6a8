#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
# It installs Python 3.11 and the grader's pinned dependencies into /autograder/venv.
set -euo pipefail
cd /autograder/source
if ! command -v python3.11 >/dev/null 2>&1; then
    apt-get update
    apt-get install -y --no-install-recommends software-properties-common
    # Python 3.11 for Ubuntu releases that do not ship it.
    add-apt-repository -y ppa:deadsnakes/ppa || true
    apt-get update
    apt-get install -y --no-install-recommends python3.11 python3.11-venv
fi
python3.11 -m venv /autograder/venv
PIP=(/autograder/venv/bin/python -m pip install --no-cache-dir --disable-pip-version-check)
if [ -f torch-version ]; then
    # An assignment's bundle: torch's CPU build (no CUDA libraries: gloo ranks on the CPU).
    "${PIP[@]}" "torch==$(cat torch-version)" --index-url https://download.pytorch.org/whl/cpu
fi
"${PIP[@]}" -r requirements-autograder.txt
# Compile the grader once, so that no grading run pays for it.
/autograder/venv/bin/python -m compileall -q autograde sandbox grading solutions $(ls -d assignments labs 2>/dev/null)
# Smoke test: the grader imports, and its sandbox can be built on this image.
if [ -f assignment ]; then
    /autograder/venv/bin/python -c "import assignments.common as c, torch.distributed; c.grader('$(cat assignment)')"
else
    /autograder/venv/bin/python -c "import sandbox.handle, grading"
fi
