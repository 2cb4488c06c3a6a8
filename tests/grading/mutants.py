"""Plausible wrong variants of each exercise, generated from plain student-style templates.

Each *mutant* changes one thing in a correct template, the way students slip: an off-by-one
loop, swapped operands or exponents, a dropped term, a wrong constant, a unit slip, integer
division, a flipped comparison, an early return. ``tests/grading/test_mutation.py`` grades
every mutant with the real checks and requires each to lose points; the fraction caught is
the *mutation score*, printed at the end of the test run. Mutants that agree with the
correct answer on every valid input (e.g. ``//`` where ``num_gpus`` always divides) are
*equivalent*: they are not wrong, so they are counted apart and not graded.

The variants are generated when the tests run; none is stored in the repository.
"""
from __future__ import annotations

import ast
import copy
import math
import random
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from grading import independent
from grading.framework import REL_TOL

TEMPLATES = {
    "ex1": ("chinchilla_loss", '''
E, A, B = 1.69, 406.0, 410.0
ALPHA, BETA = 0.34, 0.28

def chinchilla_loss(N, D):
    return E + A / N**ALPHA + B / D**BETA
'''),
    "ex2": ("compute_optimal", '''
def compute_optimal(C, ratios=None):
    if ratios is None:
        ratios = np.logspace(-1, 3.3, 200)
    best = None
    for i in range(len(ratios)):
        r = ratios[i]
        N = np.sqrt(C / (6 * r))
        D = r * N
        loss = chinchilla_loss(N, D)
        if best is None or loss < best[3]:
            best = (N, D, r, loss)
    return best
'''),
    "ex3": ("memory_per_gpu", '''
BYTES_PER_PARAM = 12

def memory_per_gpu(model_params, strategy, num_gpus):
    full = BYTES_PER_PARAM * model_params
    if strategy == "dp":
        return full
    if strategy in ("tp", "pp", "fsdp"):
        return full / num_gpus
    raise ValueError("strategy must be one of 'dp', 'tp', 'pp', 'fsdp'")
'''),
    "ex4": ("communication_time_per_step", '''
def communication_time_per_step(model_params, dp_rank, tp_rank, num_layers, seq_len,
                                batch_size, d_model, bandwidth_tb_s):
    dp_volume = 2 * (2 * model_params)
    tp_volume = num_layers * 2 * (2 * batch_size * seq_len * d_model)
    bandwidth = bandwidth_tb_s * 1e12
    return (dp_volume + tp_volume) / bandwidth
'''),
    "ex4b": ("communication_time_per_step_by_axis", '''
def communication_time_per_step_by_axis(model_params, dp_degree, tp_degree, pp_degree, num_layers,
                                        seq_len, micro_batch, num_microbatches, d_model,
                                        intra_node_gb_s, inter_node_gb_s):
    activation = 2 * micro_batch * seq_len * d_model
    dp_ring = 2 * (dp_degree - 1) / dp_degree
    dp_bytes = dp_ring * 2 * model_params / (tp_degree * pp_degree)
    tp_ring = 2 * (tp_degree - 1) / tp_degree
    layers = num_layers / pp_degree
    tp_bytes = layers * num_microbatches * 4 * tp_ring * activation
    if pp_degree == 1:
        sends = 0
    elif pp_degree == 2:
        sends = 1
    else:
        sends = 2
    pp_bytes = sends * num_microbatches * activation
    intra = intra_node_gb_s * 1e9
    inter = inter_node_gb_s * 1e9
    return (dp_bytes / inter, tp_bytes / intra, pp_bytes / inter)
'''),
}

_SWAP_OPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
             ast.Pow: ast.Mult}
_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.Pow)
_CONSTANT_SLIPS = (("x2", lambda c: c * 2), ("/2", lambda c: c / 2), ("+1", lambda c: c + 1),
                   ("-1", lambda c: c - 1), ("x1000", lambda c: c * 1000),
                   ("/1000", lambda c: c / 1000), ("x8", lambda c: c * 8))
_COMPARE_FLIPS = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
                  ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_UNIT_SLIPS = ((" * 1000", 1e3), (" / 1000", 1e-3), (" * 8", 8.0), (" / 1e9", 1e-9))


@dataclass(frozen=True)
class Mutant:
    exercise: str
    function: str
    what: str  # e.g. "line 5: `/` -> `//`"
    source: str

    def build(self) -> Callable:
        namespace = {"np": np, "math": math, "chinchilla_loss": independent.chinchilla_loss}
        exec(compile(self.source, f"<mutant {self.exercise}: {self.what}>", "exec"), namespace)
        return namespace[self.function]


def _sites(tree: ast.AST) -> list:
    return [node for node in ast.walk(tree)]


def _variants(tree: ast.Module) -> Iterator[tuple[str, Callable[[ast.Module], None]]]:
    """(description, edit) pairs; each edit changes one node of a fresh copy of ``tree``."""
    nodes = _sites(tree)
    for index, node in enumerate(nodes):
        line = getattr(node, "lineno", 0)

        def at(i=index):
            return lambda t: _sites(t)[i]

        if isinstance(node, ast.BinOp):
            name = type(node.op).__name__
            if type(node.op) in _SWAP_OPS:
                new = _SWAP_OPS[type(node.op)]
                yield (f"line {line}: {name} -> {new.__name__}",
                       lambda t, f=at(), new=new: setattr(f(t), "op", new()))
            if isinstance(node.op, ast.Div):
                yield (f"line {line}: integer division",
                       lambda t, f=at(): setattr(f(t), "op", ast.FloorDiv()))
            if isinstance(node.op, _NON_COMMUTATIVE):
                def swap(t, f=at()):
                    n = f(t)
                    n.left, n.right = n.right, n.left
                yield f"line {line}: swapped operands of {name}", swap
            if isinstance(node.op, (ast.Add, ast.Sub)):
                yield (f"line {line}: dropped the right term",
                       lambda t, f=at(): _replace(t, f(t), f(t).left))
                yield (f"line {line}: dropped the left term",
                       lambda t, f=at(): _replace(t, f(t), f(t).right))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            for label, slip in _CONSTANT_SLIPS:
                yield (f"line {line}: constant {node.value!r} {label}",
                       lambda t, f=at(), slip=slip: setattr(f(t), "value", slip(f(t).value)))
        elif isinstance(node, ast.Constant) and type(node.value) is str and len(node.value) <= 4:
            for other in ("dp", "tp", "pp", "fsdp", "zero"):
                if other != node.value:
                    yield (f"line {line}: {node.value!r} -> {other!r}",
                           lambda t, f=at(), o=other: setattr(f(t), "value", o))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_FLIPS:
            new = _COMPARE_FLIPS[type(node.ops[0])]
            yield (f"line {line}: {type(node.ops[0]).__name__} -> {new.__name__}",
                   lambda t, f=at(), new=new: setattr(f(t), "ops", [new()]))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "range":
            yield (f"line {line}: range(len(x) - 1), the off-by-one loop",
                   lambda t, f=at(): setattr(f(t), "args", [ast.BinOp(
                       f(t).args[0], ast.Sub(), ast.Constant(1))]))
            yield (f"line {line}: range(1, len(x)), skips the first",
                   lambda t, f=at(): setattr(f(t), "args", [ast.Constant(1), f(t).args[0]]))
        elif isinstance(node, ast.For):
            yield (f"line {line}: return inside the loop (an early return)",
                   lambda t, f=at(): f(t).body.append(ast.Return(ast.Name("best", ast.Load()))))
            yield (f"line {line}: break after the first pass",
                   lambda t, f=at(): f(t).body.append(ast.Break()))
        elif isinstance(node, ast.Return) and node.value is not None:
            for label, factor in _UNIT_SLIPS:
                yield (f"line {line}: unit slip, returns{label}",
                       lambda t, f=at(), k=factor: setattr(f(t), "value", ast.BinOp(
                           f(t).value, ast.Mult(), ast.Constant(k))))
        elif isinstance(node, ast.Raise):
            yield (f"line {line}: returns instead of raising",
                   lambda t, f=at(): _replace(t, f(t), ast.Return(ast.Name("full", ast.Load()))))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id.isupper():
            for other in ("E", "A", "B", "ALPHA", "BETA"):
                if other != node.id and node.id in ("E", "A", "B", "ALPHA", "BETA"):
                    yield (f"line {line}: {node.id} -> {other} (swapped constants)",
                           lambda t, f=at(), o=other: setattr(f(t), "id", o))


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list) and any(v is old for v in value):
                setattr(parent, field, [new if v is old else v for v in value])
                return


def mutants(exercise: str) -> list[Mutant]:
    """Every single-change variant of the exercise's template that still compiles."""
    function, template = TEMPLATES[exercise]
    tree = ast.parse(template)
    out, seen = [], set()
    for what, edit in _variants(tree):
        changed = copy.deepcopy(tree)
        try:
            edit(changed)
            source = ast.unparse(ast.fix_missing_locations(changed))
            compile(source, "<mutant>", "exec")
        except Exception:
            continue
        if source not in seen and source != ast.unparse(tree):
            seen.add(source)
            out.append(Mutant(exercise, function, what, source))
    return out


# ------------------------------------------------------------------ equivalence on valid inputs

def _valid_inputs(exercise: str, rng: random.Random) -> list:
    if exercise == "ex1":
        return [(10 ** rng.uniform(5, 15), 10 ** rng.uniform(6, 16)) for _ in range(30)]
    if exercise == "ex2":
        return [(10 ** rng.uniform(15, 28), None) for _ in range(4)] + [
            (10 ** rng.uniform(15, 28), [10 ** rng.uniform(-1, 3.6) for _ in range(rng.randint(1, 9))])
            for _ in range(12)]
    if exercise == "ex3":
        out = []
        for _ in range(40):
            g = rng.choice([1, 2, 3, 8, 12, 96, 1024])
            out.append((float(g * rng.randint(1, 10**10)), rng.choice(["dp", "tp", "pp", "fsdp"]), g))
        return out + [(7e9, "zero", 8), (7e9, "expert", 8)]
    if exercise == "ex4b":
        out = []
        for _ in range(40):
            pp = rng.choice([1, 2, 3, 4, 8, 16])
            out.append((10 ** rng.uniform(6, 13), rng.randint(1, 4096), rng.randint(1, 64), pp,
                        pp * rng.randint(1, 40), rng.choice([1024, 4096, 32768]), rng.randint(1, 16),
                        rng.randint(1, 128), 128 * rng.randint(1, 128), rng.uniform(10, 2000),
                        rng.uniform(1, 400)))
        return out
    return [(10 ** rng.uniform(6, 13), rng.randint(1, 4096), rng.randint(1, 64), rng.randint(1, 200),
             rng.choice([1024, 4096, 32768]), rng.randint(1, 64), 128 * rng.randint(1, 128),
             rng.uniform(0.01, 5)) for _ in range(30)]


def _outcome(function, args):
    try:
        value = function(*args)
    except Exception as exc:
        return ("raises", type(exc).__name__)
    try:
        return ("value", [float(v) for v in value] if isinstance(value, tuple) else float(value))
    except Exception:
        return ("odd", repr(value)[:50])


def _agree(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] != "value":
        return a == b
    x, y = a[1], b[1]
    if isinstance(x, list) != isinstance(y, list):
        return False
    xs, ys = (x, y) if isinstance(x, list) else ([x], [y])
    # Equal within the grader's own tolerance: a change no check may see (1e12 + 1 for 1e12).
    return len(xs) == len(ys) and all(
        math.isclose(p, q, rel_tol=REL_TOL) or (math.isnan(p) and math.isnan(q)) for p, q in zip(xs, ys))


def is_equivalent(mutant: Mutant, seed: int = 0) -> bool:
    """Does ``mutant`` give the correct outcome on every one of many valid inputs?"""
    rng = random.Random(seed)
    right = independent.FUNCTIONS[mutant.function]
    try:
        wrong = mutant.build()
    except Exception:
        return False
    return all(_agree(_outcome(wrong, args), _outcome(right, args))
               for args in _valid_inputs(mutant.exercise, rng))


#: Filled by test_mutation.py and printed at the end of the run by conftest.py:
#: exercise -> (caught, graded, equivalent, [what of each mutant that was not caught]).
SCORES: dict = {}
