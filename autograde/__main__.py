import atexit
import os
import sys

from .cli import main

code = main()
# Grading is over and every report file is written and closed. Run the exit handlers (they
# stop the sandbox's template process) and flush, then leave without the interpreter's
# teardown of numpy and the checks, which costs a cold run tens of milliseconds. Any
# trouble flushing (a closed pipe) takes the ordinary exit, which reports it as before.
try:
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
except BaseException:
    sys.exit(code)
os._exit(code)
