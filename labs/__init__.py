"""The course's labs: real ``torch.distributed`` programs that predict with ``solutions``,
measure, and compare. Each runs as ``python -m labs.<lab> --nproc N [--backend auto|gloo|nccl]
--report PATH`` (or under torchrun) and has a paired notebook (``labs/0N-*.md``):

* ``collectives`` (Lab 1): all-reduce, all-gather, reduce-scatter, and a ring all-reduce
  written by hand, with bytes and bandwidth;
* ``ddp`` (Lab 2): a small GPT trained with DDP, checked against one process;
* ``fsdp`` (Lab 3): the same model with FSDP2, memory and traffic against the ZeRO-3 model;
* ``tensor_parallel`` (Lab 4): Megatron's column- and row-parallel MLP and attention;
* ``pipeline_parallel`` (Lab 5): GPipe and 1F1B over real stages, the bubble measured;
* ``scaling_law`` (Lab 6): a scaling law of the reader's own small runs, fitted;
* ``predict_vs_measure`` (Lab 7): the step-time model against the labs' own runs;
* ``expert_parallel`` (Lab 8): a mixture-of-experts layer over expert-parallel ranks, its
  dispatch and combine all-to-alls counted and timed against the model;
* ``grid3d`` (Lab 5's last section): a data x tensor grid of process groups, built from one
  tensor, each group's traffic against the per-axis model.

Each report's ``checks`` compare prediction and measurement. ``labs.launch`` starts and
supervises the ranks. ``python -m labs.gpu_check`` runs every lab on the GPUs present and
writes one summary.
"""
import os as _os
import sys as _sys

if _sys.argv[:1] == ["-m"] and "RANK" not in _os.environ:
    # ``python -m labs.<lab>``, being started (argv[0] is "-m" only while the module is found):
    # Ctrl-C while torch is imported ends it in one line, not a traceback. The launcher takes
    # Ctrl-C back once it runs (labs.launch.main), to stop its ranks.
    import signal as _signal

    def _interrupted_while_starting(signum, frame):
        _sys.stderr.write("\ninterrupted before the lab started: no rank was running\n")
        _os._exit(130)

    try:
        _signal.signal(_signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # not the main thread
        pass

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
