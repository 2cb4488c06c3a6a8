"""The self-check's old name (``from tests.grading.selfcheck import self_check``): see
:mod:`autograde.selfcheck`, and this package's docstring for how long it stays."""
from autograde.selfcheck import *  # noqa: F401,F403
from autograde.selfcheck import ALLOWED_IMPORTS, TIMEOUT, self_check  # noqa: F401
