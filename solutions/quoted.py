"""Often-quoted figures that the course corrects or qualifies.

Several figures repeated across the web about training large models are
wrong, rounded, or true only under an assumption that goes unstated. Each
entry quotes the figure exactly as it is usually stated, so that a notebook
can glue it into an "Often quoted / What the sources say" note, and names
where the right figure comes from: a table in :mod:`solutions.facts` or a
function that computes it. Nothing here is a fact about the world; the
verified figures live in :mod:`solutions.facts` and the tests check every
correction against them.

Each ``cite`` is the bibtex key (``book/references.bib``) of the source used
for the correction, and ``sections`` names the chapter notebooks that discuss
it (``book/errata.md`` collects them).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

__all__ = ["QuotedClaim", "QUOTED_CLAIMS", "VERDICTS", "REGIME_BOUNDS"]

#: How far off a claim is: ``wrong`` (the figure is false), ``imprecise``
#: (true of something else than what it is said of), ``rounded`` (a rounding
#: the chapter replaces with the source's figure), ``conditional`` (true only
#: under an unstated assumption), ``heuristic`` (a rule of thumb stated as a law).
VERDICTS = ("wrong", "imprecise", "rounded", "conditional", "heuristic")


@dataclass(frozen=True)
class QuotedClaim:
    """One often-quoted claim.

    ``quoted`` maps short names to the quoted numbers as it states them
    (read-only); ``says`` is the claim in a few words; ``correction`` gives
    the right figure or where :mod:`solutions` computes it.
    """

    key: str
    quoted: Mapping[str, float]
    says: str
    verdict: str
    correction: str
    cite: str
    sections: tuple

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not self.quoted:
            raise ValueError(f"claim {self.key!r}: quoted must hold at least one figure")
        # A read-only copy, so that a notebook cannot change the table for the others.
        object.__setattr__(self, "quoted", MappingProxyType(dict(self.quoted)))
        object.__setattr__(self, "sections", tuple(self.sections))

    def __getitem__(self, name: str) -> float:
        """``claim["gpus"]`` is ``claim.quoted["gpus"]``."""
        return self.quoted[name]


_CLAIMS = (
    QuotedClaim(
        "mtnlg_layout",
        {"tp": 8, "pp": 35, "dp": 64, "gpus": 17_920},
        "Megatron-Turing NLG 530B was trained with 8-way TP x 35-way PP x 64-way DP across 17,920 GPUs",
        "wrong",
        "TP and PP are right; the paper reports three smaller data-parallel degrees "
        "(facts.LAYOUTS), and Selene has only facts.SELENE.num_gpus GPUs",
        "smith2022mtnlg",
        ("00-introduction", "06-model-parallelism", "08-when-to-use-what"),
    ),
    QuotedClaim(
        "llama3_cluster",
        {"gpus": 24_000},
        "Llama 3 was trained on a 24,000-GPU H100 cluster",
        "imprecise",
        "that is the cluster (facts.LLAMA3_CLUSTER); 405B pre-training used at most "
        "facts.LLAMA3_CLUSTER.largest_run GPUs (facts.LAYOUTS)",
        "dubey2024llama3",
        ("06-model-parallelism", "08-when-to-use-what"),
    ),
    QuotedClaim(
        "state_70b",
        {"params": 70e9, "state_gb": 700},
        "a 70B model's training state is closer to 700 GB",
        "wrong",
        "the quoted own 12 bytes per parameter give memory.memory_per_gpu(70e9, 'dp', 1); "
        "ZeRO's 16-byte count gives more (memory.zero_memory_per_gpu, convention 'zero_16')",
        "rajbhandari2020zero",
        ("01-single-gpu", "04-why-distribute"),
    ),
    QuotedClaim(
        "state_7b",
        {"params": 7e9, "state_gb": 100},
        "a 7B model's training state, about 100 GB with activations, fits on no single GPU",
        "wrong",
        "an H200 holds it (facts.GPUS['H200'].memory_gb); the total is computed in "
        "01-single-gpu from memory.memory_breakdown and memory.activation_memory_per_layer",
        "nvidia2024h200",
        ("01-single-gpu",),
    ),
    QuotedClaim(
        "h100_peak",
        {"tflops": 1000},
        "an H100 peaks around 1000 TFLOPS at BF16",
        "rounded",
        "the dense bf16 peak of the H100 SXM is facts.GPUS['H100 SXM'].peak_flops_per_s; "
        "twice that assumes 2:4 structured sparsity",
        "nvidia2022hopper",
        ("01-single-gpu",),
    ),
    QuotedClaim(
        "train_70b_years",
        {"params": 70e9, "tokens": 1.4e12, "years": 20},
        "a 70B model on 1.4T tokens takes closer to 20 years on one H100 at peak",
        "rounded",
        "compute.training_time_seconds(scaling.training_flops(70e9, 1.4e12), H100 SXM peak), "
        "and several times longer at a real run's utilisation (facts.MFU)",
        "nvidia2022hopper",
        ("01-single-gpu",),
    ),
    QuotedClaim(
        "optimal_ratio_drift",
        {"ratio_low": 60, "budget_low": 1e22, "ratio_high": 100, "budget_high": 1e25},
        "the fitted equation's optimal D/N drifts from roughly 60 at 1e22 FLOPs to over 100 at 1e25",
        "conditional",
        "true only for the constants as printed (scaling.HOFFMANN_ROUNDED); the unrounded "
        "constants (scaling.HOFFMANN_PRECISE) and the Epoch AI refit (scaling.EPOCH_2024) give "
        "far lower ratios: scaling.compute_optimal_closed_form",
        "hoffmann2022chinchilla",
        ("03-chinchilla",),
    ),
    QuotedClaim(
        "exercise_constants",
        {"A": 406.0, "B": 410.0, "loss_gpt3": 2.002, "loss_chinchilla": 1.936},
        "Chinchilla's fit has A = 406.0 and B = 410.0; GPT-3's loss is 2.002 and Chinchilla's 1.936",
        "rounded",
        "the paper prints A and B to one decimal (scaling.HOFFMANN_ROUNDED); the quoted losses "
        "hold only for the quoted whole numbers, which the exercises keep (scaling.EXERCISE)",
        "hoffmann2022chinchilla",
        ("03-chinchilla", "09-exercises"),
    ),
    QuotedClaim(
        "dp_limit",
        {"gpus": 1000},
        "past roughly 1000 GPUs the data-parallel all-reduce starts to dominate compute time",
        "heuristic",
        "the crossover moves with the batch, the network bandwidth and the throughput per GPU; "
        "05-data-parallelism computes it from communication.allreduce_bytes_per_rank and "
        "compute.training_time_seconds",
        "nccltests",
        ("05-data-parallelism",),
    ),
    QuotedClaim(
        "fsdp_7b",
        {"params": 7e9, "gpus": 8, "before_gb": 84, "after_gb": 11},
        "FSDP on 8 GPUs takes a 7B model's state from about 84 GB to about 11 GB per GPU, "
        "and 84 GB barely fits on an H100",
        "conditional",
        "right for the quoted 12 bytes per parameter (memory.memory_per_gpu, 'fsdp'), rounded up; "
        "ZeRO's 16 bytes give more (memory.zero_memory_per_gpu, 'zero_16'); and the unsharded "
        "state exceeds an H100's facts.GPUS['H100 SXM'].memory_gb",
        "rajbhandari2020zero",
        ("07-fsdp",),
    ),
)

#: The quoted claims, by key.
QUOTED_CLAIMS = MappingProxyType({claim.key: claim for claim in _CLAIMS})

#: The quoted rule of thumb for choosing a strategy by model size (in
#: parameters): small below ``small_max``, medium up to ``medium_max``, large
#: above it, frontier above ``frontier_min``. Not a measurement and not
#: corrected: 08-when-to-use-what uses it as stated and computes the reason
#: behind each boundary.
REGIME_BOUNDS = MappingProxyType({"small_max": 1e9, "medium_max": 30e9, "frontier_min": 100e9})
