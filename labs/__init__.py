"""The course's labs: real ``torch.distributed`` programs that predict with ``solutions``,
measure, and compare.

* ``python -m labs.collectives --nproc N``: all-reduce, all-gather, reduce-scatter, and a
  ring all-reduce written by hand, with bytes and bandwidth;
* ``python -m labs.ddp --nproc N``: a small GPT trained with DDP, checked against one process;
* ``python -m labs.fsdp --nproc N``: the same model with FSDP2, memory and traffic against
  the ZeRO-3 model, next to DDP.

Each writes a JSON report (``--report PATH``) whose ``checks`` compare prediction and
measurement. ``labs.launch`` starts and supervises the ranks. ``python -m labs.gpu_check``
runs every lab on the GPUs present and writes one summary.
"""
import os as _os

if "LABS_LAUNCHER_PID" in _os.environ and "RANK" in _os.environ:
    # A rank started by labs.launch: die with the launcher, whatever kills it, so that no
    # rank outlives its run. Set as early as possible (before torch is imported).
    try:
        import ctypes as _ctypes
        import signal as _signal

        _PR_SET_PDEATHSIG = 1
        _ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(_signal.SIGKILL))
        if _os.getppid() != int(_os.environ["LABS_LAUNCHER_PID"]):
            _os._exit(1)  # the launcher is already gone
    except (OSError, AttributeError, ValueError, TypeError):
        pass  # not Linux: the launcher's own clean-up still kills its ranks
