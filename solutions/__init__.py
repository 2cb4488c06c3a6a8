"""Reference solutions for the chapter "Scaling laws & distributed training".

The exercise functions (Exercises 1-3, and Exercise 4's parts (a) and (b)) are
importable from the package root with the exact semantics of the exercise text:

>>> from solutions import chinchilla_loss, compute_optimal, memory_per_gpu, communication_time_per_step
>>> round(chinchilla_loss(175e9, 300e9), 3)
2.002

Richer models live in the submodules: :mod:`solutions.scaling`,
:mod:`solutions.memory`, :mod:`solutions.communication`,
:mod:`solutions.pipeline`, :mod:`solutions.compute`, :mod:`solutions.layout`,
beyond 3D parallelism and Chinchilla in :mod:`solutions.context`,
:mod:`solutions.moe`, :mod:`solutions.after_chinchilla` and
:mod:`solutions.efficiency`, and the cited tables in :mod:`solutions.facts` (and, for the
field in 2025-26, :mod:`solutions.frontier`).
"""

from . import quoted, communication, compute, facts, layout, memory, pipeline, scaling
from . import after_chinchilla, context, efficiency, frontier, moe
from .communication import communication_time_per_step, communication_time_per_step_by_axis
from .memory import memory_per_gpu
from .scaling import chinchilla_loss, compute_optimal

__all__ = [
    "chinchilla_loss",
    "compute_optimal",
    "memory_per_gpu",
    "communication_time_per_step",
    "communication_time_per_step_by_axis",
    "scaling",
    "memory",
    "communication",
    "pipeline",
    "compute",
    "facts",
    "layout",
    "quoted",
    "context",
    "moe",
    "after_chinchilla",
    "efficiency",
    "frontier",
]
