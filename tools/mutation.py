"""Mutation testing: how many single-bug versions of the course's code does the suite catch?

    python tools/mutation.py            # plant every mutation, print a table (about 10 min on 2 cores,
                                        # and 4 more for the step-time model's, -k stm-)
    python tools/mutation.py --list     # the mutations, without running anything
    python tools/mutation.py -k zero    # only the mutations whose id contains "zero"
    python tools/mutation.py --json mutation.json --jobs 2

Each mutation replaces one exact piece of text in one file of ``solutions/`` or ``labs/``
with a wrong version (16 bytes per parameter instead of 12, the ring factor dropped, a
loosened tolerance...). The tool copies the repository to a temporary folder, plants the
mutations there one at a time (the working tree is never modified), runs the tests listed
with each mutation, and reports which of them failed: a mutation is *caught* when at least
one test that passes on the unmodified copy fails with the mutation planted.

The list below is data: each entry is ``Mutation(id, file, old, new, tests, what)``. When a
file changes, an entry whose ``old`` text is gone is reported as ``OLD TEXT NOT FOUND`` (and
one whose text occurs more than once as ``AMBIGUOUS``): update the entry, keeping the bug it
plants. ``tests`` are pytest arguments (paths, node ids, ``-k`` expressions), chosen to be
the few test files that should catch the bug, so that a run stays short.

Exit status: 0 when every mutation was planted and caught, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Not copied to the scratch tree: environments, build outputs and caches.
IGNORE = shutil.ignore_patterns(".git", ".venv", "_build", "__pycache__", ".hypothesis", ".pytest_cache",
                                "*.pyc", ".ipynb_checkpoints", "reports")
RUN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` (which must occur exactly once in ``file``) with ``new``; run ``tests``."""

    id: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str


# Test selections: the files whose job it is to catch a bug in each module.
SCALING = ("tests/solutions/test_solutions_scaling.py", "tests/solutions/test_solutions_facts_quoted.py", "tests/solutions/test_solutions_misc.py",
           "tests/grading")
MEMORY = ("tests/solutions/test_solutions_memory.py", "tests/solutions/test_solutions_facts_quoted.py", "tests/grading")
COMMUNICATION = ("tests/solutions/test_solutions_communication.py", "tests/solutions/test_solutions_facts_quoted.py", "tests/grading")
PIPELINE = ("tests/solutions/test_solutions_pipeline.py",)
COMPUTE = ("tests/solutions/test_solutions_misc.py", "tests/solutions/test_solutions_facts_quoted.py")
VALIDATE = ("tests/solutions/test_solutions_misc.py", "tests/solutions/test_solutions_memory.py", "tests/grading")
# The labs start real processes (tens of seconds a run): stop at the first failing test (-x),
# so the table names the first test that caught the mutation, not every one.
LAB_COLLECTIVES = ("tests/labs/test_labs.py", "-x", "-k", "collectives or ring")
LAB_DDP = ("tests/labs/test_labs.py", "-x", "-k", "ddp and not killed")
LAB_FSDP = ("tests/labs/test_labs.py", "-x", "-k", "fsdp")
# The planner's step-time model (solutions/steptime.py and the modules it reads): its equations
# by hand in test_steptime.py, the mixture-of-experts pieces also in their own files. Left out:
# the re-derivation of the calibrated constants (and its leave-one-out), which fails on any change
# to the model's output, a fix as much as a bug, and takes most of the file's time; a mutation
# must be caught by a test of its mechanism, or by the published runs the model is held to.
_NO_REFIT = ("-k", "not calibration_is_rederived and not leave_one_out")
STEPTIME = ("tests/solutions/test_steptime.py", *_NO_REFIT)
MOE_STEP = ("tests/solutions/test_steptime.py", "tests/solutions/test_solutions_moe_ep.py",
            "tests/solutions/test_expert_tensor_parallel.py", "tests/solutions/test_eager_experts.py", *_NO_REFIT)
PLAN = ("tests/solutions/test_plan.py",)

M = Mutation
MUTATIONS: tuple[Mutation, ...] = (
    # -- solutions/scaling.py ---------------------------------------------------------------
    M("loss-alpha-beta-swapped", "solutions/scaling.py",
      "return c.E + c.A / N**c.alpha + c.B / D**c.beta",
      "return c.E + c.A / N**c.beta + c.B / D**c.alpha",
      SCALING, "Chinchilla loss with the exponents of N and D swapped"),
    M("exercise-constants-printed", "solutions/scaling.py",
      "E=1.69, A=406.0, B=410.0, alpha=0.34, beta=0.28,",
      "E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28,",
      SCALING, "Exercise 1 uses the paper's printed A, B instead of the exercise's"),
    M("grid-201-points", "solutions/scaling.py",
      "DEFAULT_RATIOS = np.logspace(-1, 3.3, 200)",
      "DEFAULT_RATIOS = np.logspace(-1, 3.3, 201)",
      SCALING, "Exercise 2's ratio grid has 201 points instead of 200"),
    M("flops-8ND", "solutions/scaling.py",
      "FLOPS_PER_PARAM_PER_TOKEN = 6",
      "FLOPS_PER_PARAM_PER_TOKEN = 8",
      SCALING, "training compute 8ND instead of 6ND"),
    M("sweep-last-minimum-wins", "solutions/scaling.py",
      "best = np.argmin(loss, axis=-1)",
      "best = loss.shape[-1] - 1 - np.argmin(loss[..., ::-1], axis=-1)",
      SCALING, "a tie on the grid goes to the last ratio, not the first (the template's strict <)"),
    M("allocation-exponent-alpha", "solutions/scaling.py",
      "return constants.beta / (constants.alpha + constants.beta)",
      "return constants.alpha / (constants.alpha + constants.beta)",
      SCALING, "N_opt ~ C^(alpha/(alpha+beta)) instead of beta/(alpha+beta)"),
    M("closed-form-coefficient", "solutions/scaling.py",
      "return (c.alpha * c.A / (c.beta * c.B)) ** (1.0 / (c.alpha + c.beta))",
      "return (c.beta * c.B / (c.alpha * c.A)) ** (1.0 / (c.alpha + c.beta))",
      SCALING, "closed-form G inverted"),
    M("kaplan-exponent", "solutions/scaling.py",
      "KAPLAN_N_EXPONENT = 0.73",
      "KAPLAN_N_EXPONENT = 0.5",
      SCALING, "Kaplan's N ~ C^0.73 replaced by 0.5"),
    # -- solutions/memory.py ----------------------------------------------------------------
    M("chapter-16-bytes", "solutions/memory.py",
      '"chapter_12", 2, 2, 8,',
      '"chapter_12", 2, 2, 12,',
      MEMORY, "the chapter's 12 bytes per parameter become 16"),
    M("zero-12-bytes", "solutions/memory.py",
      '"zero_16", 2, 2, 12,',
      '"zero_16", 2, 2, 8,',
      MEMORY, "ZeRO's 16 bytes per parameter become 12 (no master weights)"),
    M("dp-divides-by-gpus", "solutions/memory.py",
      'if strategy == "dp":\n        return full',
      'if strategy == "dp":\n        return full / n',
      MEMORY, "Exercise 3: data parallelism splits the state like the sharded strategies"),
    M("sharded-not-divided", "solutions/memory.py",
      "divides(\"num_gpus\", n, \"model_params\", N)\n    return full / n",
      "divides(\"num_gpus\", n, \"model_params\", N)\n    return full",
      MEMORY, "Exercise 3: TP/PP/FSDP keep a full replica"),
    M("zero1-keeps-optimizer", "solutions/memory.py",
      "if stage >= 1:\n        o = o / dp_degree",
      "if stage >= 2:\n        o = o / dp_degree",
      MEMORY, "ZeRO-1 does not shard the optimizer state"),
    M("zero2-keeps-gradients", "solutions/memory.py",
      "if stage >= 2:\n        g = g / dp_degree",
      "if stage >= 3:\n        g = g / dp_degree",
      MEMORY, "ZeRO-2 does not shard the gradients"),
    M("zero3-keeps-weights", "solutions/memory.py",
      "if stage >= 3:\n        w = w / dp_degree",
      "if stage >= 4:\n        w = w / dp_degree",
      MEMORY, "ZeRO-3 does not shard the weights"),
    M("3d-shards-over-all-gpus", "solutions/memory.py",
      "return zero_memory_per_gpu(shard, zero_stage, dp, convention)",
      "return zero_memory_per_gpu(shard, zero_stage, dp * tp * pp, convention)",
      MEMORY, "3D: ZeRO shards over every GPU instead of the data-parallel degree"),
    M("3d-ignores-pp", "solutions/memory.py",
      "shard = np.asarray(P, dtype=np.float64) / (tp * pp)",
      "shard = np.asarray(P, dtype=np.float64) / tp",
      MEMORY, "3D: pipeline stages do not split the model"),
    M("activations-attention-not-split", "solutions/memory.py",
      "out = sbh * (10 + 24 / t + attn / t)",
      "out = sbh * (10 + 24 / t + attn)",
      MEMORY, "TP activations: the attention-score term is not divided by t"),
    M("breakdown-fsdp-is-zero2", "solutions/memory.py",
      '"fsdp": 3, "tp": 3',
      '"fsdp": 2, "tp": 3',
      MEMORY, "the breakdown's FSDP keeps whole weights (ZeRO-2)"),
    # -- solutions/communication.py ---------------------------------------------------------
    M("ring-factor-dropped", "solutions/communication.py",
      "dp_factor = (3.0 if stage == 3 else 2.0) * (dp - 1) / dp",
      "dp_factor = (3.0 if stage == 3 else 2.0)",
      COMMUNICATION, "DP volume without the ring's (d-1)/d"),
    M("ring-allreduce-factor-halved", "solutions/communication.py",
      "return _out(2.0 * (np.asarray(n) - 1) / n)",
      "return _out(1.0 * (np.asarray(n) - 1) / n)",
      COMMUNICATION, "ring all-reduce factor (n-1)/n instead of 2(n-1)/n"),
    M("allgather-factor-one", "solutions/communication.py",
      "return _out((np.asarray(n) - 1.0) / n)",
      "return _out(np.asarray(n) / n)",
      COMMUNICATION, "all-gather sends the whole buffer"),
    M("ring-steps", "solutions/communication.py",
      "return 2 * (n - 1)",
      "return n - 1",
      COMMUNICATION, "ring all-reduce takes n-1 steps instead of 2(n-1)"),
    M("ring-simulation-4-bytes", "solutions/communication.py",
      "chunk_bytes = data[0, 0].nbytes if data.ndim == 3 else data.itemsize",
      "chunk_bytes = 4 * (data.shape[2] if data.ndim == 3 else 1)",
      COMMUNICATION, "the ring simulation counts 4 bytes per element whatever the dtype"),
    M("ring-simulation-gather-uncounted", "solutions/communication.py",
      "data[(r + 1) % n, sends[r]] = incoming[r]\n            sent[r] += chunk_bytes",
      "data[(r + 1) % n, sends[r]] = incoming[r]",
      COMMUNICATION, "the ring simulation does not count the all-gather's bytes"),
    M("exercise4-no-allreduce-factor", "solutions/communication.py",
      "dp_volume = 2 * (2 * np.asarray(P))",
      "dp_volume = 2 * np.asarray(P)",
      COMMUNICATION, "Exercise 4 drops the all-reduce factor 2"),
    M("exercise4-bandwidth-unit", "solutions/communication.py",
      "bandwidth_bytes_s = np.asarray(bw) * 1e12",
      "bandwidth_bytes_s = np.asarray(bw) * 1e9",
      COMMUNICATION, "Exercise 4 reads TB/s as GB/s"),
    M("exercise4-tp-uses-layers", "solutions/communication.py",
      "tp_per_layer = 2 * (2 * np.asarray(b, dtype=np.float64) * s * h)",
      "tp_per_layer = 2 * (2 * np.asarray(b, dtype=np.float64) * s * L)",
      COMMUNICATION, "Exercise 4's TP volume uses the layer count for d_model"),
    M("tp-two-allreduces", "solutions/communication.py",
      "elems = 4 * np.asarray(b, dtype=np.float64) * s * h * ring_allreduce_factor(tp)",
      "elems = 2 * np.asarray(b, dtype=np.float64) * s * h * ring_allreduce_factor(tp)",
      COMMUNICATION, "2 TP all-reduces per layer instead of 4 (backward forgotten)"),
    M("tp-always-nvlink", "solutions/communication.py",
      "tp_bw = bw_intra if tp <= gpn else bw_inter",
      "tp_bw = bw_intra",
      COMMUNICATION, "TP across nodes still gets NVLink bandwidth"),
    M("tp-nvlink-boundary", "solutions/communication.py",
      "tp_bw = bw_intra if tp <= gpn else bw_inter",
      "tp_bw = bw_intra if tp < gpn else bw_inter",
      COMMUNICATION, "TP over a whole node (tp == gpus_per_node) leaves NVLink"),
    M("pp-two-stages-send-both", "solutions/communication.py",
      "0 if pp == 1 else 1 if pp == 2 else 2",
      "0 if pp == 1 else 2 if pp == 2 else 2",
      COMMUNICATION, "two pipeline stages each send activations and gradients"),
    M("zero3-no-extra-gather", "solutions/communication.py",
      "(3.0 if stage == 3 else 2.0)",
      "(2.0 if stage == 3 else 2.0)",
      COMMUNICATION, "ZeRO-3 moves 2P like plain DP instead of 3P"),
    M("tp-all-layers", "solutions/communication.py",
      "layers_here = L // pp",
      "layers_here = L",
      COMMUNICATION, "each pipeline stage does the TP traffic of every layer"),
    M("nvlink-bidirectional", "solutions/communication.py",
      "DEFAULT_INTRA_NODE_BW = 450e9",
      "DEFAULT_INTRA_NODE_BW = 900e9",
      COMMUNICATION, "NVLink's 900 GB/s counted one way"),
    # -- solutions/pipeline.py --------------------------------------------------------------
    M("bubble-formula", "solutions/pipeline.py",
      "out = (p_ - 1) / (v * m_ + p_ - 1)",
      "out = (p_ - 1) / (v * m_ + p_)",
      PIPELINE, "GPipe bubble (p-1)/(m+p) instead of (p-1)/(m+p-1)"),
    M("bubble-share-no-interleave", "solutions/pipeline.py",
      "out = (p_ - 1) / (v * m_ + p_ - 1)",
      "out = (p_ - 1) / (m_ + p_ - 1)",
      PIPELINE, "interleaving does not shrink the bubble's share of time"),
    M("bubble-relative-no-interleave", "solutions/pipeline.py",
      "out = (p_ - 1) / (v * m_)",
      "out = (p_ - 1) / m_",
      PIPELINE, "interleaving does not shrink the bubble relative to compute"),
    M("1f1b-warmup", "solutions/pipeline.py",
      "warmup = min(p - stage - 1, m)",
      "warmup = min(p - stage, m)",
      PIPELINE, "1F1B warms up with one forward too many"),
    M("interleaved-backward-chunk-order", "solutions/pipeline.py",
      "return group * p + within % p, chunk if forward else v - 1 - chunk",
      "return group * p + within % p, chunk",
      PIPELINE, "interleaved 1F1B runs the backward passes' chunks in forward order"),
    M("interleaved-chunk-time", "solutions/pipeline.py",
      "t_fwd / scale",
      "t_fwd",
      PIPELINE, "an interleaved chunk's forward pass takes the whole stage's time"),
    # -- solutions/compute.py ---------------------------------------------------------------
    M("attention-flops-6", "solutions/compute.py",
      "12.0 * np.asarray(L) * s * h",
      "6.0 * np.asarray(L) * s * h",
      COMPUTE, "PaLM's attention FLOPs 6 L s h instead of 12 L s h"),
    M("year-365-days", "solutions/compute.py",
      "SECONDS_PER_YEAR = 365.25 * 24 * 3600",
      "SECONDS_PER_YEAR = 365 * 24 * 3600",
      COMPUTE, "a year of 365 days (0.07% off: a tolerance test)"),
    M("training-time-ignores-mfu", "solutions/compute.py",
      "(np.asarray(n) * np.asarray(peak) * np.asarray(mfu))",
      "(np.asarray(n) * np.asarray(peak))",
      COMPUTE, "training time ignores the utilisation"),
    # -- solutions/_validate.py -------------------------------------------------------------
    M("divisibility-unchecked", "solutions/_validate.py",
      "bad = whole & (remainder != 0)",
      "bad = whole & (remainder != remainder)",
      VALIDATE, "indivisible parameter counts are accepted silently"),
    # -- labs/collectives.py ----------------------------------------------------------------
    M("lab-ring-4-bytes-per-element", "labs/collectives.py",
      "stats.bytes_sent += send.numel() * send.element_size()",
      "stats.bytes_sent += send.numel() * 4",
      LAB_COLLECTIVES, "the ring counts 4 bytes per element whatever the dtype"),
    M("lab-ring-gather-wrong-chunk", "labs/collectives.py",
      "exchange(chunks[(r + 1 - s) % n], chunks[(r - s) % n])",
      "exchange(chunks[(r - s) % n], chunks[(r - s) % n])",
      LAB_COLLECTIVES, "the ring's all-gather sends the wrong chunk"),
    M("lab-ring-short-reduce-scatter", "labs/collectives.py",
      "for s in range(n - 1):  # reduce-scatter",
      "for s in range(n - 2):  # reduce-scatter",
      LAB_COLLECTIVES, "the ring's reduce-scatter stops one step early"),
    M("lab-ring-tolerance", "labs/collectives.py",
      "bound = 4 * n * torch.finfo(dtype).eps",
      "bound = 1e3 * n * torch.finfo(dtype).eps",
      LAB_COLLECTIVES, "the ring-vs-all_reduce tolerance loosened 250x"),
    M("lab-ring-predicted-4-bytes", "labs/collectives.py",
      "predicted = allreduce_bytes_per_rank(padded * x.element_size(), n)",
      "predicted = allreduce_bytes_per_rank(padded * 4, n)",
      LAB_COLLECTIVES, "the ring's predicted bytes assume 4-byte elements whatever the dtype"),
    M("lab-ring-padding-ignored", "labs/collectives.py",
      "padded = elements + stats.padding",
      "padded = elements",
      LAB_COLLECTIVES, "the ring's prediction ignores the padding"),
    # -- labs/ddp.py --------------------------------------------------------------------------
    M("lab-ddp-weight-bound", "labs/ddp.py",
      '{"grad": 1e-5, "param": 1e-3}',
      '{"grad": 1e-5, "param": 1e3}',
      LAB_DDP, "DDP's fp32 weight bound loosened from 1e-3 to 1e3"),
    M("lab-ddp-gradient-bound", "labs/ddp.py",
      '{"grad": 1e-5, "param": 1e-3}',
      '{"grad": 1e-2, "param": 1e-3}',
      LAB_DDP, "DDP's fp32 gradient bound loosened from 1e-5 to 1e-2"),
    M("lab-ddp-no-average", "labs/ddp.py",
      "buf.div_(world)  # average, as DDP's default hook does",
      "pass",
      LAB_DDP, "the DDP hook sums the gradients instead of averaging them"),
    M("lab-ddp-grad-bytes", "labs/ddp.py",
      "grad_bytes = P * 4",
      "grad_bytes = P * 2",
      LAB_DDP, "DDP's predicted gradient bytes assume 2-byte gradients"),
    M("lab-ddp-replica-check", "labs/ddp.py",
      "mismatched_steps += len(set(digests)) > 1",
      "mismatched_steps += 0",
      LAB_DDP, "the replica check can no longer fail"),
    # -- labs/fsdp.py, labs/training.py -------------------------------------------------------
    M("lab-fsdp-memory-tolerance", "labs/fsdp.py",
      "MEMORY_TOLERANCE_PERCENT = 2.0",
      "MEMORY_TOLERANCE_PERCENT = 50.0",
      LAB_FSDP, "FSDP's memory tolerance loosened from 2% to 50%"),
    M("lab-fsdp-gathers-once", "labs/fsdp.py",
      '"FSDP: all-gathered bytes per step (2 x parameters)", 2 * P_pad * 4',
      '"FSDP: all-gathered bytes per step (2 x parameters)", 1 * P_pad * 4',
      LAB_FSDP, "FSDP's prediction forgets the backward pass's re-gather"),
    M("lab-collective-counter-4-bytes", "labs/training.py",
      "return x.numel() * x.element_size()",
      "return x.numel() * 4",
      ("tests/labs/test_labs_counter.py",), "the collective counter counts 4 bytes per element whatever the dtype"),
    # -- the planner's step-time model: solutions/network.py ---------------------------------
    M("stm-net-one-nic-per-group", "solutions/network.py",
      'nics = per_domain if nic_share == "domain" else 1',
      "nics = 1",
      STEPTIME, "a group spanning nodes gets one NIC, not one per member in each node"),
    M("stm-net-ring-factor-dropped", "solutions/network.py",
      'return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n',
      'return 2.0 if op == "all_reduce" else 1.0',
      STEPTIME, "ring timing sends the whole buffer (2 or 1), not 2(n-1)/n or (n-1)/n of it"),
    M("stm-net-no-network-latency", "solutions/network.py",
      'inter = (2 if op == "all_reduce" else 1) * (link.domains - 1)',
      "inter = 0",
      STEPTIME, "a ring's steps that cross the network are charged NVLink's per-step latency"),
    M("stm-net-domain-boundary", "solutions/network.py",
      "if span <= domain:",
      "if span < domain:",
      STEPTIME, "a group that fills one scale-up domain exactly (TP8 on an HGX) leaves NVLink"),
    # -- solutions/hardware.py -----------------------------------------------------------------
    M("stm-hw-memory-gb-not-gib", "solutions/hardware.py",
      "GIB, MIB = 2**30, 2**20",
      "GIB, MIB = 1e9, 2**20",
      STEPTIME, "a GPU's capacity in GiB read as GB (7% less memory)"),
    M("stm-hw-allocator-reserve-dropped", "solutions/hardware.py",
      "ALLOCATOR_RESERVE_BYTES = 1 * 2**30",
      "ALLOCATOR_RESERVE_BYTES = 0",
      STEPTIME, "nothing kept back for the CUDA context and NCCL's buffers"),
    M("stm-hw-nics-not-shared", "solutions/hardware.py",
      "return self.nics_per_node * self.nic_bytes_per_s / self.gpus_per_node",
      "return self.nic_bytes_per_s",
      STEPTIME, "every GPU gets a whole NIC, even where a node has fewer NICs than GPUs"),
    M("stm-hw-missing-format-unchecked", "solutions/hardware.py",
      "if not self.supports(precision):",
      "if False:",
      ("tests/solutions/test_expert_kernels_and_fp8_attention.py", *STEPTIME),
      "a precision the chip lacks (NVFP4 on an H100) is not refused in one line"),
    # -- solutions/precision.py ----------------------------------------------------------------
    M("stm-prec-fp8-weights-2-bytes", "solutions/precision.py",
      'Recipe("fp8", 1.0, 2.0, 1.0, 1.0, 0.0,',
      'Recipe("fp8", 1.0, 4.0, 1.0, 1.0, 0.0,',
      STEPTIME, "FP8's weight and transpose copies counted at 2 bytes an element"),
    M("stm-prec-fp8-gather-2-bytes", "solutions/precision.py",
      'Recipe("fp8", 1.0, 2.0, 1.0, 1.0, 0.0,',
      'Recipe("fp8", 1.0, 2.0, 2.0, 1.0, 0.0,',
      STEPTIME, "FP8's ZeRO weight all-gather moves 2 bytes an element, not 1"),
    M("stm-prec-nvfp4-no-bf16-layers", "solutions/precision.py",
      "1.0, 0.15, 2.0 + 2 * (0.5 + 1 / 16) + 2.0",
      "1.0, 0.0, 2.0 + 2 * (0.5 + 1 / 16) + 2.0",
      STEPTIME, "NVFP4 runs every linear layer in FP4 (NVIDIA keeps about 15% in BF16)"),
    # -- solutions/efficiency.py ---------------------------------------------------------------
    M("stm-eff-sp-norms-not-split", "solutions/efficiency.py",
      "per_gpu = sbh * (replicated / (t if sp else 1) + split / t) + scores / t",
      "per_gpu = sbh * (replicated + split / t) + scores / t",
      ("tests/solutions/test_solutions_beyond3d.py", *STEPTIME),
      "sequence parallelism does not split the norms' inputs and the dropout masks"),
    # -- solutions/layer_time.py and the attention context ---------------------------------------
    M("stm-causal-full-context", "solutions/steptime.py",
      "            return w - w * w / (2.0 * s)\n        return s / 2.0",
      "            return w - w * w / (2.0 * s)\n        return float(s)",
      STEPTIME, "causal attention's FlashAttention sees every key (the mask no longer halves the context)"),
    M("stm-lt-tp-not-dividing-ffn", "solutions/layer_time.py",
      "f = shape.ffn / tp",
      "f = shape.ffn",
      ("tests/solutions/test_expert_tensor_parallel.py", *STEPTIME),
      "TP does not divide the MLP products' width"),
    M("stm-lt-sp-elementwise-repeated", "solutions/layer_time.py",
      "rep = tp if sp else 1",
      "rep = 1",
      STEPTIME, "sequence parallelism does not split the h-wide elementwise work over TP"),
    M("stm-lt-fp8-attention-at-bf16", "solutions/layer_time.py",
      'c_attn = gpu.ceiling("fp8") if lay.attention_precision == "fp8" else c16',
      "c_attn = c16",
      ("tests/solutions/test_expert_kernels_and_fp8_attention.py", *STEPTIME),
      "FP8 attention runs at the BF16 ceiling"),
    M("stm-lt-experts-ignore-imbalance", "solutions/layer_time.py",
      "copies = Tm * m.top_k * k_imb * lay.etp",
      "copies = Tm * m.top_k * lay.etp",
      MOE_STEP, "the busiest GPU's experts run the mean number of token copies"),
    # -- solutions/moe_step.py, solutions/moe.py -----------------------------------------------
    M("stm-moe-imbalance-uncapped", "solutions/moe_step.py",
      "return min(cfg.imbalance, min(cfg.top_k, cfg.experts / ep) * ep / cfg.top_k)",
      "return cfg.imbalance",
      MOE_STEP, "the load imbalance asked for is applied whatever the EP degree (even at EP1)"),
    M("stm-moe-a2a-forward-only", "solutions/moe_step.py",
      "per_copy = hidden * (dispatch_bytes + combine_bytes) * 2 * tokens * busiest(cfg, ep)",
      "per_copy = hidden * (dispatch_bytes + combine_bytes) * tokens * busiest(cfg, ep)",
      MOE_STEP, "the dispatch and combine all-to-alls counted once, not forward and backward"),
    M("stm-moe-experts-not-sharded-by-ep", "solutions/moe_step.py",
      "expert = (expert_params / (pp * ep * etp), edp)",
      "expert = (expert_params / (pp * etp), edp)",
      MOE_STEP, "every GPU holds all the experts of its stage (EP does not shard them)"),
    M("stm-moe-edp-is-dp", "solutions/moe_step.py",
      "edp = (tp * cp * dp) // (ep * etp)",
      "edp = dp * cp",
      MOE_STEP, "ZeRO shards the experts over all DP ranks, not the expert-data-parallel ones"),
    M("stm-moe-ep-divisibility-unchecked", "solutions/moe_step.py",
      "if cfg.experts % ep:",
      "if ep > cfg.experts:",
      MOE_STEP, "experts not divisible by EP are accepted (only EP above the experts refused)"),
    M("stm-moe-top-k-unchecked", "solutions/moe_step.py",
      "if self.top_k > self.experts:",
      "if False:",
      MOE_STEP, "top-k above the number of experts is not refused by its own message"),
    M("stm-moe-node-limit-ignored", "solutions/moe_step.py",
      "if cfg.node_limit:",
      "if False:",
      MOE_STEP, "node-limited routing (DeepSeek-V3's 4 nodes) does not cap the domains a token reaches"),
    M("stm-moe-deepep-no-dedup", "solutions/moe_step.py",
      "domains = (D - 1) * (1 - (1 - 1 / D) ** k)",
      "domains = k * (D - 1) / D",
      MOE_STEP, "DeepEP sends a copy per remote expert, not one per remote domain"),
    # -- solutions/steptime.py -----------------------------------------------------------------
    M("stm-overlap-beyond-window", "solutions/steptime.py",
      "h_ = min(seconds, window)",
      "h_ = seconds",
      STEPTIME, "overlap hides more communication than the compute window it hides behind"),
    M("stm-mfu-against-precision-peak", "solutions/steptime.py",
      'peak16 = gpu.bf16_peak if not cpu else gpu.peak_flops_per_s["fp32"]',
      'peak16 = gpu.peak(precision_name) if not cpu else gpu.peak_flops_per_s["fp32"]',
      STEPTIME, "MFU against the FP8 (or FP4) peak, reported as MFU against BF16"),
    M("stm-tp-not-repeated-by-recompute", "solutions/steptime.py",
      'calls = 1.5 if lay.recompute == "full" else 1.0',
      "calls = 1.0",
      STEPTIME, "full recomputation does not repeat the forward pass's TP collectives"),
    M("stm-pp-fill-crosses-once", "solutions/steptime.py",
      "crossings = 2 * lay.virtual_stages * (lay.pp - 1)",
      "crossings = lay.pp - 1",
      STEPTIME, "the pipeline's fill and drain cross p-1 boundaries, not 2 v (p-1)"),
    M("stm-1f1b-stashes-every-microbatch", "solutions/steptime.py",
      "        return min(m, p) * (1 + (p - 1) / (p * v))\n    return min(p, m)",
      "        return min(m, p) * (1 + (p - 1) / (p * v))\n    return m",
      STEPTIME, "1F1B holds every micro-batch's activations, as GPipe does"),
    # -- solutions/plan.py ---------------------------------------------------------------------
    M("stm-plan-search-skips-ep", "solutions/plan.py",
      "return [e for e in EP_CHOICES if shape.moe.experts % e == 0 and (t * c * d) % (e * etp) == 0]",
      "return [1] if (t * c * d) % etp == 0 else []",
      PLAN, "the layout search never tries expert parallelism"),
    M("stm-plan-tp-beyond-domain", "solutions/plan.py",
      "[t for t in TP_CHOICES if t <= cluster.domain and shape.heads % t == 0",
      "[t for t in TP_CHOICES if shape.heads % t == 0",
      PLAN, "the search tries TP beyond the scale-up domain (TP4 over PCIe pairs)"),
)


@dataclass
class Result:
    id: str
    file: str
    what: str
    status: str  # caught, SURVIVED, OLD TEXT NOT FOUND, AMBIGUOUS, TIMEOUT (caught), ERROR
    caught_by: list = field(default_factory=list)
    seconds: float = 0.0
    detail: str = ""

    @property
    def caught(self) -> bool:
        return self.status in ("caught", "TIMEOUT (caught)")


def plant(text: str, mutation: Mutation) -> str:
    """The mutated text. Raises LookupError naming the problem when ``old`` is not there
    exactly once."""
    count = text.count(mutation.old)
    if count == 0:
        raise LookupError("OLD TEXT NOT FOUND")
    if count > 1:
        raise LookupError(f"AMBIGUOUS ({count} matches)")
    return text.replace(mutation.old, mutation.new)


def copy_tree(dest: Path) -> Path:
    shutil.copytree(ROOT, dest, ignore=IGNORE, symlinks=True)
    return dest


def run_tests(tree: Path, selection: tuple[str, ...], timeout: float) -> tuple[set, set, bool, str]:
    """Run pytest on ``selection`` inside ``tree``: (failed test ids, passed test ids,
    timed out, tail of the output)."""
    xml = tree / "_mutation_junit.xml"
    xml.unlink(missing_ok=True)
    shutil.rmtree(tree / ".hypothesis", ignore_errors=True)  # no examples remembered from the last mutant
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest", *selection, "-q", "-o", "addopts=", "-p", "no:cacheprovider",
           "--hypothesis-seed=0", f"--junitxml={xml}"]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return set(), set(), True, ""
    failed, passed = set(), set()
    if xml.exists():
        for case in ET.parse(xml).iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                failed.add(name)
            elif case.find("skipped") is None:
                passed.add(name)
    elif proc.returncode != 0:  # pytest could not even start (an import error at collection)
        failed.add("(collection)")
    return failed, passed, False, (proc.stdout + proc.stderr)[-2000:]


def _short(test_id: str) -> str:
    """tests.test_x::test_y[param] -> test_x::test_y"""
    module, _, name = test_id.partition("::")
    return f"{module.rsplit('.', 1)[-1]}::{name.split('[', 1)[0]}"


def baseline(tree: Path, selections, timeout: float, log) -> dict:
    """Tests that fail with nothing planted, per selection: they cannot count as catching."""
    broken = {}
    for sel in selections:
        t0 = time.monotonic()
        failed, passed, timed_out, tail = run_tests(tree, sel, timeout)
        if timed_out or not passed:
            raise SystemExit(f"baseline run of {' '.join(sel)} did not work:\n{tail}")
        broken[sel] = failed
        note = f"; {len(failed)} already failing, ignored: {sorted(map(_short, failed))}" if failed else ""
        log(f"baseline {' '.join(sel)}: {len(passed)} passed in {time.monotonic() - t0:.0f} s{note}")
    return broken


def run_one(tree: Path, m: Mutation, broken: dict, timeout: float) -> Result:
    path = tree / m.file
    original = path.read_text(encoding="utf-8")
    res = Result(m.id, m.file, m.what, "ERROR")
    try:
        mutated = plant(original, m)
    except LookupError as exc:
        res.status = str(exc)
        return res
    t0 = time.monotonic()
    path.write_text(mutated, encoding="utf-8")
    try:
        failed, _, timed_out, tail = run_tests(tree, m.tests, timeout)
    finally:
        path.write_text(original, encoding="utf-8")
    res.seconds = time.monotonic() - t0
    if timed_out:
        res.status = "TIMEOUT (caught)"
        return res
    new_failures = failed - broken.get(m.tests, set())
    res.caught_by = sorted({_short(t) for t in new_failures})
    res.status = "caught" if new_failures else "SURVIVED"
    if not new_failures:
        res.detail = tail[-300:]
    return res


def format_table(results: list[Result]) -> str:
    width = max(len(r.id) for r in results)
    lines = [f"{'mutation':<{width}}  {'status':<18} {'s':>4}  caught by"]
    for r in results:
        by = ", ".join(r.caught_by[:3]) + (f" (+{len(r.caught_by) - 3} more)" if len(r.caught_by) > 3 else "")
        lines.append(f"{r.id:<{width}}  {r.status:<18} {r.seconds:>4.0f}  {by or r.what}")
    caught = sum(r.caught for r in results)
    lines.append(f"mutation score: {caught} of {len(results)} planted mutations caught")
    missing = [r.id for r in results if r.status.startswith(("OLD TEXT", "AMBIGUOUS"))]
    if missing:
        lines.append(f"could not plant (update these entries in tools/mutation.py): {', '.join(missing)}")
    survived = [r.id for r in results if r.status == "SURVIVED"]
    if survived:
        lines.append(f"survived (no test failed): {', '.join(survived)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/mutation.py", description=__doc__.splitlines()[0])
    parser.add_argument("-k", dest="match", default="", help="only mutations whose id contains this text")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutations run at once, each in its own copy (default 1)")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S, help="seconds per test run (default 600)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if args.match in m.id]
    if args.list:
        for m in chosen:
            print(f"{m.id:<34} {m.file:<28} {m.what}")
        return 0
    if not chosen:
        parser.error(f"no mutation id contains {args.match!r}")
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutation-") as scratch:
        trees = [copy_tree(Path(scratch) / f"tree{j}") for j in range(min(args.jobs, len(chosen)))]
        broken = baseline(trees[0], sorted({m.tests for m in chosen}), args.timeout, log)

        def work(j: int) -> list[Result]:
            out = []
            for m in chosen[j::len(trees)]:
                r = run_one(trees[j], m, broken, args.timeout)
                log(f"{r.id}: {r.status} ({r.seconds:.0f} s)")
                out.append(r)
            return out

        with ThreadPoolExecutor(len(trees)) as pool:
            done = {r.id: r for rs in pool.map(work, range(len(trees))) for r in rs}
    results = [done[m.id] for m in chosen]
    print(format_table(results))
    print(f"({time.monotonic() - started:.0f} s in all; the working tree was not modified)")
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "caught": r.caught} for r in results], indent=1) + "\n")
    return 0 if all(r.caught for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
