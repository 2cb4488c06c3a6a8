"""Cited figures the chapter relies on: hardware, models, parallel layouts,
clusters, utilisation, the scope of the scaling-law studies, and the quoted
claims that turned out wrong (quoted in full in :mod:`solutions.quoted`).

Every entry carries ``cite``, a bibtex key in ``book/references.bib``. Figures
are as reported by the sources; derived numbers (training time, ratios,
memory) are computed elsewhere in :mod:`solutions`, never stored here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import hardware as _hardware

__all__ = [
    "GPU",
    "GPUS",
    "Interconnect",
    "INTERCONNECTS",
    "Model",
    "MODELS",
    "Architecture",
    "ARCHITECTURES",
    "ARCHITECTURE_ALIASES",
    "BatchSchedule",
    "LLAMA3_405B_BATCH_SCHEDULE",
    "Layout",
    "LAYOUTS",
    "Cluster",
    "SELENE",
    "LLAMA3_CLUSTER",
    "CLUSTERS",
    "PowerLaw",
    "KAPLAN_LOSS_LAWS",
    "ScalingStudy",
    "HOFFMANN_STUDY",
    "MFU",
    "ZERO_EXAMPLE",
    "MoEArchitecture",
    "MOE_ARCHITECTURES",
    "MOE_LAYOUTS",
    "FP8Recipe",
    "FP8_RECIPES",
    "DEEPSEEK_V3_ALL_TO_ALL_BYTES",
    "PipelineSchedule",
    "PIPELINE_SCHEDULES",
    "DEEPSEEK_V3_MLA",
    "pipeline_stash",
    "LLAMA3_LONG_CONTEXT_TOKENS",
    "NVLINK_DOMAINS",
    "RUN_SIZES_COMPARED",
    "PublishedRun",
    "PUBLISHED_RUNS", "HELDOUT_RUNS", "OTHER_STACK_RUNS", "AMD_PROJECTION", "GPT_OSS_KERNEL_REGRESSION", "GPT_OSS_GB200_DISPATCH",
    "GPT_OSS_SINK_ATTENTION",
    "MCORE_MOE_REPORT_TFLOPS", "PARALLEL_FOLDING_EXAMPLE",
    "MEGATRON_TRAINING_ESTIMATES",
]


@dataclass(frozen=True)
class GPU:
    """Peak dense 16-bit tensor throughput (FLOP/s) and memory (GB = 1e9 bytes).
    ``fp8_flops_per_s``: dense FP8 tensor throughput, where the source gives it."""

    name: str
    peak_flops_per_s: float
    precision: str
    memory_gb: float
    cite: str
    note: str = ""
    fp8_flops_per_s: Optional[float] = None


def _chapter_gpu(name: str) -> GPU:
    """A row of :data:`solutions.hardware.GPU_TABLE` (the one source of GPU figures) in the
    chapter's terms: its 16-bit tensor peak and the vendor's memory figure in GB."""
    spec = _hardware.GPU_TABLE[name]
    sixteen = "bf16" if "bf16" in spec.peak_flops_per_s else "fp16"
    return GPU(name, spec.peak_flops_per_s[sixteen], f"{sixteen} {'dense' if sixteen == 'bf16' else 'tensor'}",
               float(spec.memory_vendor.split()[0]), spec.cite[0], spec.chapter_note,
               spec.peak_flops_per_s.get("fp8"))


#: The GPUs the chapter's tables and figures use (the planner knows more:
#: :data:`solutions.hardware.GPU_TABLE`).
GPUS = {name: _chapter_gpu(name) for name in ("T4", "A100 40GB", "A100 80GB", "H100 SXM", "H100 PCIe", "H200")}


@dataclass(frozen=True)
class Interconnect:
    """Link bandwidth per GPU in bytes/s (one direction unless noted)."""

    name: str
    bytes_per_s: float
    cite: str
    note: str = ""


INTERCONNECTS = {
    i.name: i
    for i in (
        Interconnect("NVLink (H100 SXM)", 450e9, "nvidia2022h100",
                     "900 GB/s total bidirectional per GPU; 450 GB/s each way"),
        Interconnect("400 Gb/s NIC", 50e9, "dubey2024llama3",
                     "one 400 Gb/s RoCE/InfiniBand port per GPU = 50 GB/s"),
    )
}


@dataclass(frozen=True)
class Model:
    """Parameters and training tokens as reported; ``training_flops`` only
    where the source states it (otherwise compute 6ND)."""

    name: str
    params: float
    tokens: float
    cite: str
    training_flops: Optional[float] = None


MODELS = {
    m.name: m
    for m in (
        Model("GPT-3", 175e9, 300e9, "brown2020gpt3"),
        Model("Gopher", 280e9, 300e9, "rae2021gopher"),
        Model("MT-NLG", 530e9, 270e9, "smith2022mtnlg"),
        Model("Chinchilla", 70e9, 1.4e12, "hoffmann2022chinchilla"),
        Model("PaLM", 540e9, 780e9, "chowdhery2022palm"),
        Model("Llama 3 405B", 405e9, 15.6e12, "dubey2024llama3", training_flops=3.8e25),
    )
}


@dataclass(frozen=True)
class Architecture:
    """Transformer shape as reported: layers, model width, attention heads
    (``kv_heads`` for grouped-query or multi-query attention) and training
    sequence length; ``ffn_hidden`` is the MLP width where it is used here.
    ``head_dim`` where the head size is not ``d_model / heads`` (PaLM);
    ``vocab``, ``mlp`` (``'gelu'`` or ``'swiglu'``) and ``dropout`` as trained."""

    name: str
    params: float
    layers: int
    d_model: int
    heads: int
    seq_len: int
    cite: str
    kv_heads: Optional[int] = None
    ffn_hidden: Optional[int] = None
    head_dim: Optional[int] = None
    vocab: Optional[int] = None
    mlp: str = "gelu"
    dropout: bool = True


ARCHITECTURES = {
    a.name: a
    for a in (
        Architecture("GPT-3", 175e9, 96, 12288, 96, 2048, "brown2020gpt3"),  # Table 2.1
        Architecture("Gopher", 280e9, 80, 16384, 128, 2048, "rae2021gopher"),  # Table 1
        Architecture("MT-NLG", 530e9, 105, 20480, 128, 2048, "smith2022mtnlg"),
        Architecture("Chinchilla", 70e9, 80, 8192, 64, 2048, "hoffmann2022chinchilla"),  # Table 4
        # Table 1; multi-query attention: one key/value head shared by all 48 (sec. 2);
        # head size 256 at every scale (sec. 2.1), so attention is 48 x 256 = 12,288 wide;
        # SwiGLU, a 256K-token vocabulary, no dropout in pre-training (sec. 2 and 5).
        Architecture("PaLM", 540e9, 118, 18432, 48, 2048, "chowdhery2022palm", kv_heads=1, head_dim=256,
                     ffn_hidden=4 * 18432, vocab=256_000, mlp="swiglu", dropout=False),
        # Dubey et al. 2024, Table 3; 8K-token sequences in standard pre-training.
        # SwiGLU MLPs with the FFN dimensions of Table 3.
        Architecture("Llama 3 8B", 8e9, 32, 4096, 32, 8192, "dubey2024llama3", kv_heads=8, ffn_hidden=14336,
                     vocab=128_000, mlp="swiglu", dropout=False),
        Architecture("Llama 3 70B", 70e9, 80, 8192, 64, 8192, "dubey2024llama3", kv_heads=8, ffn_hidden=28672,
                     vocab=128_000, mlp="swiglu", dropout=False),
        Architecture("Llama 3 405B", 405e9, 126, 16384, 128, 8192, "dubey2024llama3", kv_heads=8,
                     ffn_hidden=53248, vocab=128_000, mlp="swiglu", dropout=False),
    )
}

#: Other names of the architectures above: the models Dubey et al. 2024 describe were
#: released as Llama 3.1 ("All results in this paper are for the Llama 3.1 models", Table 1),
#: with the shapes of Table 3.
ARCHITECTURE_ALIASES = {"Llama 3.1 8B": "Llama 3 8B", "Llama 3.1 70B": "Llama 3 70B", "Llama 3.1 405B": "Llama 3 405B"}


@dataclass(frozen=True)
class BatchSchedule:
    """A batch-size ramp: ``stages`` is a tuple of ``(tokens_per_batch,
    seq_len, from_tokens)``: from ``from_tokens`` tokens seen onwards, batches
    of ``tokens_per_batch`` tokens in sequences of ``seq_len``."""

    model: str
    stages: tuple
    cite: str


#: Dubey et al. 2024, sec. 3.4.1: 4M-token batches of 4,096-token sequences,
#: then 8M of 8,192 after 252M tokens, then 16M after 2.87T tokens.
#: "M" here is 2**20 tokens (4,096 x 1,024 = 4,194,304).
LLAMA3_405B_BATCH_SCHEDULE = BatchSchedule(
    "Llama 3 405B",
    ((4 * 2**20, 4096, 0.0), (8 * 2**20, 8192, 252e6), (16 * 2**20, 8192, 2.87e12)),
    "dubey2024llama3",
)


@dataclass(frozen=True)
class Layout:
    """One reported 3D-parallel configuration. ``cp`` is context parallelism;
    ``ep`` expert parallelism, carved out of the data-parallel ranks (so it
    must divide ``dp``). ``tflops_per_gpu`` and ``mfu`` as reported (None
    where not reported)."""

    model: str
    num_gpus: int
    tp: int
    pp: int
    dp: int
    cite: str
    cp: int = 1
    tflops_per_gpu: Optional[float] = None
    mfu: Optional[float] = None
    note: str = ""
    ep: int = 1

    def __post_init__(self):
        if self.tp * self.cp * self.pp * self.dp != self.num_gpus:
            raise ValueError(f"layout {self} does not multiply out to num_gpus")
        if self.dp % self.ep:
            raise ValueError(f"layout {self}: ep must divide dp")


LAYOUTS = (
    # Smith et al. 2022: each replica is 8-way TP within a DGX A100 node x
    # 35-way PP across nodes = 280 GPUs; throughput on 280/350/420 nodes.
    Layout("MT-NLG", 2240, 8, 35, 8, "smith2022mtnlg", tflops_per_gpu=126),
    Layout("MT-NLG", 2800, 8, 35, 10, "smith2022mtnlg", tflops_per_gpu=121),
    Layout("MT-NLG", 3360, 8, 35, 12, "smith2022mtnlg", tflops_per_gpu=113),
    # Dubey et al. 2024, Table 4 (Llama 3 405B on H100s).
    Layout("Llama 3 405B", 8192, 8, 16, 64, "dubey2024llama3", cp=1, mfu=0.43),
    Layout("Llama 3 405B", 16384, 8, 16, 128, "dubey2024llama3", cp=1, mfu=0.41),
    Layout("Llama 3 405B", 16384, 8, 16, 8, "dubey2024llama3", cp=16, mfu=0.38,
           note="long-context stage"),
)


@dataclass(frozen=True)
class Cluster:
    """A machine a reported run was trained on. ``num_gpus`` is the size of
    the machine, not of any job on it; :attr:`largest_run` is the largest
    job in :data:`LAYOUTS` for ``model``. ``nodes`` and ``gpus_per_node``
    only where the source states them."""

    name: str
    num_gpus: int
    gpu: str
    model: str
    cite: str
    nodes: Optional[int] = None
    gpus_per_node: Optional[int] = None
    note: str = ""

    def __post_init__(self):
        if (self.nodes is None) != (self.gpus_per_node is None):
            raise ValueError(f"cluster {self.name!r}: give both nodes and gpus_per_node, or neither")
        if self.nodes is not None and self.nodes * self.gpus_per_node != self.num_gpus:
            raise ValueError(f"cluster {self.name!r}: nodes x gpus_per_node does not equal num_gpus")

    @property
    def largest_run(self) -> int:
        """GPUs in the largest reported layout of ``model`` (from :data:`LAYOUTS`)."""
        return max(lay.num_gpus for lay in LAYOUTS if lay.model == self.model)


#: NVIDIA's Selene, where Megatron-Turing NLG was trained (Smith et al. 2022):
#: 560 DGX A100 nodes of 8 GPUs. The reported runs used half to three quarters of it.
SELENE = Cluster("Selene", 4480, "A100", "MT-NLG", "smith2022mtnlg", nodes=560, gpus_per_node=8)

#: Meta's H100 cluster for Llama 3 (Dubey et al. 2024). The paper gives its
#: size as "24K GPUs"; 405B pre-training used at most 16,384 of them
#: (:attr:`Cluster.largest_run`, from Table 4 in :data:`LAYOUTS`).
LLAMA3_CLUSTER = Cluster("Llama 3 H100 cluster", 24_000, "H100", "Llama 3 405B", "dubey2024llama3",
                         note='size given as "24K GPUs"')

CLUSTERS = {c.name: c for c in (SELENE, LLAMA3_CLUSTER)}


@dataclass(frozen=True)
class PowerLaw:
    """A one-variable scaling law ``L(X) = (X_c / X)^exponent`` as reported
    (only the exponent is stored: the fitted ``X_c`` is not used here)."""

    name: str
    variable: str
    exponent: float
    cite: str
    note: str = ""


#: Kaplan et al. 2020, eqs. 1.1 and 1.2: test loss against model size (models
#: trained near convergence on enough data) and against data (large models
#: stopped early). ``N`` counts non-embedding parameters.
KAPLAN_LOSS_LAWS = {
    "N": PowerLaw("L(N)", "non-embedding parameters", 0.076, "kaplan2020scaling"),
    "D": PowerLaw("L(D)", "training tokens", 0.095, "kaplan2020scaling"),
}


@dataclass(frozen=True)
class ScalingStudy:
    """The scope of a scaling-law experiment as its authors state it: more
    than ``min_models`` runs, with parameter and token counts spanning the
    given (low, high) ranges."""

    name: str
    min_models: int
    params: tuple
    tokens: tuple
    cite: str
    note: str = ""

    def __post_init__(self):
        for field in ("params", "tokens"):
            low, high = getattr(self, field)
            if not 0 < low < high:
                raise ValueError(f"study {self.name!r}: {field} must be a (low, high) range, got {(low, high)}")


#: Hoffmann et al. 2022 (abstract): more than 400 models, from 70M to more than
#: 16B parameters, trained on 5B to 500B tokens.
HOFFMANN_STUDY = ScalingStudy(
    "Hoffmann et al. 2022", 400, (70e6, 16e9), (5e9, 500e9), "hoffmann2022chinchilla",
    note="'more than' applies to the model count and the largest size",
)


#: Reported model FLOPs utilisation, as fractions (Chowdhery et al. 2022,
#: Table 3 for PaLM, MT-NLG, Gopher, GPT-3; Dubey et al. 2024 Table 4 for Llama 3).
MFU = {
    "PaLM": {"mfu": 0.462, "cite": "chowdhery2022palm"},
    "MT-NLG": {"mfu": 0.302, "cite": "chowdhery2022palm"},
    "Gopher": {"mfu": 0.325, "cite": "chowdhery2022palm"},
    "GPT-3": {"mfu": 0.213, "cite": "chowdhery2022palm"},
    "Llama 3 405B": {"mfu": (0.38, 0.43), "cite": "dubey2024llama3"},
}

#: ZeRO's worked example (Rajbhandari et al. 2020, Fig. 1): 7.5B parameters,
#: data-parallel degree 64, 16 bytes/param; reported GB per GPU by stage.
ZERO_EXAMPLE = {
    "params": 7.5e9,
    "dp_degree": 64,
    "convention": "zero_16",
    "reported_gb": {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9},
    "cite": "rajbhandari2020zero",
}




#: Dubey et al. 2024, sec. 3.4.2: the final pre-training stage extends the
#: context to 128K tokens; Table 4's CP16 layout is for this stage.
LLAMA3_LONG_CONTEXT_TOKENS = 131_072


@dataclass(frozen=True)
class MoEArchitecture:
    """A mixture-of-experts transformer as reported: parameters stored
    (``total_params``) and used per token (``active_params``), layers, width,
    heads, routed ``experts`` per MoE layer of which ``top_k`` are used per
    token, always-used ``shared_experts``, each expert's MLP width
    ``expert_ffn``, ``dense_layers`` (leading layers with a plain MLP) and
    ``node_limit``, the most nodes one token's experts may span, and ``router_groups``, the
    fixed groups of experts (the nodes of the deployment it was trained on) the router picks
    ``node_limit`` of.

    For the planner: ``head_dim`` where it is not ``d_model / heads``,
    ``ffn_hidden`` of the dense layers' MLP, ``layer_freq`` (one MoE layer every
    ``layer_freq`` layers after the dense ones), ``seq_len`` of pre-training,
    multi-head latent attention's widths (``mla``: q_lora, kv_lora, qk_nope,
    qk_rope, v_head), ``sliding_window`` and the share of layers that use it,
    ``expert_bias`` (the experts' products carry biases) and ``clamped_glu`` (the
    experts' GLU clamps its two halves before gating them)."""

    name: str
    total_params: float
    active_params: float
    layers: int
    d_model: int
    heads: int
    experts: int
    top_k: int
    expert_ffn: int
    cite: str
    kv_heads: Optional[int] = None
    shared_experts: int = 0
    dense_layers: int = 0
    vocab: Optional[int] = None
    node_limit: Optional[int] = None
    router_groups: Optional[int] = None
    note: str = ""
    head_dim: Optional[int] = None
    ffn_hidden: Optional[int] = None
    layer_freq: int = 1
    seq_len: int = 4096
    mla: Optional[tuple] = None
    sliding_window: Optional[int] = None
    sliding_share: float = 0.0
    expert_bias: bool = False
    clamped_glu: bool = False


#: DeepSeek-V3's multi-head latent attention (Liu et al. 2024, sec. 4.2): query and key/value
#: compressions of 1,536 and 512, 128 + 64 (rope) per head for queries and keys, 128 for values;
#: Kimi K2 keeps them (Kimi Team 2025, sec. 2.3).
_DEEPSEEK_V3_MLA = (("q_lora", 1536), ("kv_lora", 512), ("qk_nope", 128), ("qk_rope", 64), ("v_head", 128))

MOE_ARCHITECTURES = {
    a.name: a
    for a in (
        # Jiang et al. 2024, sec. 2 and Table 1: "47B" stored, "13B" active;
        # SwiGLU experts, grouped-query attention, 32K vocabulary.
        MoEArchitecture("Mixtral 8x7B", 47e9, 13e9, 32, 4096, 32, 8, 2, 14336, "jiang2024mixtral",
                        kv_heads=8, vocab=32000, seq_len=32768),
        # Mistral AI 2024 (Mixtral 8x22B): 141B stored, 39B active; 56 layers of width 6,144,
        # 48 heads and 8 K/V heads, 8 experts of width 16,384, two per token, 32,768-token
        # vocabulary (its released configuration).
        MoEArchitecture("Mixtral 8x22B", 141e9, 39e9, 56, 6144, 48, 8, 2, 16384, "mistral2024mixtral8x22b",
                        kv_heads=8, vocab=32768, seq_len=65536),
        # Liu et al. 2024 (DeepSeek-V3), sec. 4.2: 61 layers, the first 3 dense;
        # 1 shared + 256 routed experts of width 2,048, 8 routed per token;
        # multi-head latent attention with 128 heads; 671B stored, 37B active.
        # Dense MLP 18,432 wide; MLA: q_lora 1,536, kv_lora 512, 128 + 64 (rope) per head
        # for queries and keys, 128 for values; vocabulary 129,280; 4,096-token sequences.
        # Node-limited routing (sec. 2.1.2; M = 4, sec. 4.2): a token's experts on at most 4 of
        # the 8 nodes its 64-way EP spans (sec. 3.2), groups of 32 experts that the router keeps
        # whatever the layout it later runs on.
        MoEArchitecture("DeepSeek-V3", 671e9, 37e9, 61, 7168, 128, 256, 8, 2048, "liu2024deepseekv3",
                        shared_experts=1, dense_layers=3, node_limit=4, router_groups=8, vocab=129280, ffn_hidden=18432,
                        head_dim=128, mla=_DEEPSEEK_V3_MLA,
                        note="node-limited routing; one multi-token-prediction module on top (not counted)"),
        # Kimi Team 2025 (Kimi K2), sec. 2.3 and Table 2: DeepSeek-V3's architecture with 384
        # routed experts (8 per token) and one shared, 64 attention heads instead of 128, and
        # one dense layer instead of three; 61 layers of width 7,168, experts 2,048 wide;
        # 1.04T stored, 32.6B active. MLA widths as DeepSeek-V3's; dense MLP 18,432 wide;
        # vocabulary 163,840 (released configuration). Pre-trained with MuonClip, whose
        # optimizer step the step-time model does not count.
        MoEArchitecture("Kimi K2", 1.04e12, 32.6e9, 61, 7168, 64, 384, 8, 2048, "kimi2025k2",
                        shared_experts=1, dense_layers=1, vocab=163840, ffn_hidden=18432, head_dim=128,
                        mla=_DEEPSEEK_V3_MLA,
                        note="MuonClip optimizer (one momentum buffer, not Adam's two)"),
        # Yang et al. 2025 (Qwen3 technical report), Table 2: 94 layers, 64 query and 4 K/V
        # heads, 128 experts, 8 per token, no shared expert; 235B stored, 22B active. Width
        # 4,096, head size 128, experts 1,536 wide, vocabulary 151,936 (released configuration).
        MoEArchitecture("Qwen3-235B-A22B", 235e9, 22e9, 94, 4096, 64, 128, 8, 1536, "yang2025qwen3",
                        kv_heads=4, head_dim=128, vocab=151936),
        # The same report: Qwen3-30B-A3B, 48 layers, 32 query and 4 K/V heads, 128 experts of
        # width 768, 8 per token; 30.5B stored, 3.3B active; width 2,048.
        MoEArchitecture("Qwen3-30B-A3B", 30.5e9, 3.3e9, 48, 2048, 32, 128, 8, 768, "yang2025qwen3",
                        kv_heads=4, head_dim=128, vocab=151936),
        # Meta 2025 (Llama 4): Maverick, 17B active of 400B, 128 routed experts and a shared
        # one, one expert per token, MoE in every other layer; 48 layers of width 5,120, 40
        # heads of 128, 8 K/V heads, experts 8,192 wide, dense MLPs 16,384, vocabulary 202,048.
        MoEArchitecture("Llama 4 Maverick", 400e9, 17e9, 48, 5120, 40, 128, 1, 8192, "meta2025llama4",
                        kv_heads=8, head_dim=128, shared_experts=1, layer_freq=2, ffn_hidden=16384,
                        vocab=202048, seq_len=8192),
        # OpenAI 2025 (gpt-oss-120b model card): 36 layers, residual width 2,880, 128 experts
        # (width 2,880), four per token, 64 query heads of 64 and 8 K/V heads, attention that
        # alternates a 128-token band with full attention; 116.8B stored, 5.1B active;
        # o200k_harmony vocabulary of 201,088. Its SwiGLU clamps both halves and adds one to
        # the linear half, and its experts' products carry biases (the released weights;
        # Megatron-Bridge's GPTOSSProvider: add_bias_linear, activation_func_clamp_value 7,
        # glu_linear_offset 1).
        MoEArchitecture("gpt-oss-120b", 116.8e9, 5.1e9, 36, 2880, 64, 128, 4, 2880, "openai2025gptoss",
                        kv_heads=8, head_dim=64, vocab=201088, sliding_window=128, sliding_share=0.5,
                        expert_bias=True, clamped_glu=True),
    )
}

#: DeepSeek-V3's training layout (Liu et al. 2024, sec. 3.2): 2,048 H800 GPUs,
#: 16-way pipeline, 64-way expert parallelism across 8 nodes, ZeRO-1 data
#: parallelism (the data-parallel degree, 128, is what the GPUs leave), no
#: tensor parallelism.
MOE_LAYOUTS = (
    Layout("DeepSeek-V3", 2048, 1, 16, 128, "liu2024deepseekv3", ep=64,
           note="ZeRO-1 over the data-parallel ranks; DP derived as 2048 / 16"),
)

#: GPUs joined by one NVLink domain: an 8-GPU HGX/DGX H100 server
#: (nvidia2022h100) and NVIDIA's GB200 NVL72 rack, 72 GPUs (nvidia2024gb200).
NVLINK_DOMAINS = {
    "HGX H100": {"gpus": 8, "cite": "nvidia2022h100"},
    "GB200 NVL72": {"gpus": 72, "cite": "nvidia2024gb200"},
}

#: Hoffmann et al. 2022, sec. 2, on why their allocation differs from Kaplan
#: et al.'s: "the majority of the models used in our analysis have more than
#: 500 million parameters", while "many" of Kaplan et al.'s runs were "less
#: than 100M parameters".
RUN_SIZES_COMPARED = {
    "hoffmann_most_above": 500e6,
    "kaplan_many_below": 100e6,
    "cite": "hoffmann2022chinchilla",
}


# --------------------------------------------------------------------------
# Published training runs, for checking the step-time model
# (:mod:`solutions.steptime`) against what was measured
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedRun:
    """A training run as reported: shape, cluster, layout, batch and throughput.

    ``gpu`` names an entry of :data:`GPUS`; ``nvlink`` and ``network`` are bytes/s
    per GPU and direction inside a server and across servers. ``global_batch`` and
    ``micro_batch`` in sequences. ``virtual_stages`` is None where the source
    does not give it (the schedule was interleaved but the chunk count is not
    published). ``tflops_per_gpu`` as reported, counted as ``flops_counted``
    says: ``'hardware'`` (Megatron-LM's eq. 3, recomputation included) or
    ``'model'``; ``mfu`` where the source reports it, ``tokens_per_s_per_gpu`` where
    it reports that. ``assumed`` lists the fields the source does not state, with the
    value used; ``where`` the table and row of the source.

    Runs of 2025-26 also carry: ``arch``, a named shape of :data:`ARCHITECTURES` or
    :data:`MOE_ARCHITECTURES`; ``precision`` (``bf16``, ``fp8``, ``mxfp8``, ``nvfp4``);
    ``ep`` and ``etp`` (expert parallelism folded into ``tp x cp x dp``);
    ``sequence_parallel`` (TP without it before 2022); ``overlap``, what the stack
    overlaps (:func:`solutions.steptime.parse_overlap`; the runs of 2021-22 had no
    TP overlap); ``nvlink`` and ``network`` may be ``None`` (the GPU table's system).
    ``nic_share``: ``'domain'`` when a collective's traffic is spread over every NIC of the
    nodes it spans (NCCL's rail-optimised rings), ``'gpu'`` when each GPU's traffic went
    through its own adapter: DeepSpeed's ZeRO-3 of 2021, whose per-GPU throughput in
    Narayanan et al.'s Table 2 halves with every doubling of GPUs at a fixed batch, the
    signature of a gather bound by one 200 Gb/s adapter per GPU. ``offload_layers``: the
    layers whose activations the recipe kept in the host's memory (Megatron-Core's
    ``cpu_offloading_num_layers``). ``memory_gib``: the peak memory per GPU the source
    reports, in GiB (torchtitan logs the caching allocator's peak reserved bytes)."""

    name: str
    params: float
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    gpu: str
    nvlink: float
    network: float
    tp: int
    pp: int
    dp: int
    global_batch: int
    micro_batch: int
    recompute: str
    cite: str
    cp: int = 1
    zero: int = 0
    schedule: str = "1f1b"
    virtual_stages: Optional[int] = 1
    kv_heads: Optional[int] = None
    ffn_hidden: Optional[int] = None
    mlp: str = "gelu"
    dropout: bool = True
    attention: str = "standard"
    tflops_per_gpu: Optional[float] = None
    flops_counted: str = "hardware"
    mfu: Optional[float] = None
    assumed: str = ""
    note: str = ""
    arch: Optional[str] = None
    head_dim: Optional[int] = None
    precision: str = "bf16"
    ep: int = 1
    etp: int = 1
    sequence_parallel: bool = True
    overlap: str = "default"
    convention: str = "zero_16"
    tokens_per_s_per_gpu: Optional[float] = None
    year: int = 2021
    where: str = ""
    nic_share: str = "domain"
    offload_layers: int = 0
    memory_gib: Optional[float] = None
    expert_kernels: str = "grouped"
    attention_precision: str = "bf16"

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


#: Selene's links (Narayanan et al. 2021, sec. 5): NVLink 3 inside a DGX A100,
#: 600 GB/s per GPU both ways (nvidia2020a100), and eight 200 Gb/s HDR
#: InfiniBand adapters per 8-GPU node: 25 GB/s per GPU.
A100_NVLINK = 300e9
SELENE_NETWORK = 25e9
#: Llama 3's links (Dubey et al. 2024, sec. 3.3.1): NVLink inside an 8-GPU H100
#: server (450 GB/s each way, nvidia2022h100), one 400 Gb/s RoCE port per GPU.
H100_NVLINK = 450e9
LLAMA3_NETWORK = 50e9
#: Jean Zay (Le Scao et al. 2022, sec. 3.4.1): four 100 Gb/s Omni-Path links
#: per 8-GPU node: 6.25 GB/s per GPU.
JEAN_ZAY_NETWORK = 4 * 100e9 / 8 / 8


#: What Megatron-LM hid behind compute when Narayanan et al. (2021) measured it: nothing. In
#: the repository of April 2021 (nvidia2021megatronlmapr), a pipeline send or receive waits for
#: completion and then synchronises the device (megatron/p2p_communication.py), and the default
#: data-parallel wrapper (--DDP-impl local) only accumulates gradients during the backward pass
#: and all-reduces them once the step's last backward has finished (megatron/training.py). No
#: TP overlap either: Megatron-Core added it in 2023.
_OVERLAP_MEGATRON_2021 = "none"
#: What DeepSpeed's ZeRO-3 of 2021 hid (Narayanan et al.'s Table 2): its parameter gathers
#: and gradient reductions, prefetched and overlapped with compute.
_OVERLAP_ZERO3_2021 = "dp"
#: What DeepSpeed's pipeline engine (MT-NLG, BLOOM) overlaps: nothing. Its schedule
#: (microsoft2020deepspeedpipe) makes every send and receive between stages blocking and
#: paired with its peer's, and reduces the gradients in the step's last instruction list,
#: after the last backward pass has finished.
_OVERLAP_DEEPSPEED_PIPE = "none"
#: The same engine's schedule, which the rows no longer assume.
_DEEPSPEED_PIPE_NOTE = ("DeepSpeed's pipeline engine, whose schedule is 1F1B (microsoft2020deepspeedpipe; "
                        "solutions.pipeline.deepspeed_order)")


def _megatron(params, heads, hidden, layers, tp, pp, gpus, batch, tflops):
    """A row of Narayanan et al. 2021, Table 1: GPT shapes, 2,048-token sequences,
    51,200-token vocabulary, full recomputation, on Selene's A100s, and "the interleaved
    pipeline schedule with the scatter/gather optimization" (sec. 5.1); the chunks per stage
    are not published."""
    return PublishedRun(f"Megatron {params:g}B", params * 1e9, layers, hidden, heads, 2048, 51200, "A100 80GB",
                        A100_NVLINK, SELENE_NETWORK, tp, pp, gpus // (tp * pp), batch, 1, "full",
                        "narayanan2021megatron", tflops_per_gpu=tflops, sequence_parallel=False, overlap=_OVERLAP_MEGATRON_2021,
                        schedule="interleaved" if pp > 1 else "1f1b", virtual_stages=None if pp > 1 else 1,
                        assumed="micro-batch 1; no ZeRO; chunks per stage not published", where=f"Table 1, {params:g}B row")


def _named_shape(arch):
    """``(shape, stored parameters)`` of a named dense or MoE architecture."""
    a = MOE_ARCHITECTURES.get(arch) or ARCHITECTURES[arch]
    return a, getattr(a, "total_params", None) or a.params


#: The rows whose recipes run the routed experts as one fused grouped MLP (Transformer Engine's
#: CuTe DSL grouped GEMM with the GLU in its epilogue, ``cutedsl_fused_grouped_mlp`` or
#: ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1``) replayed in a full-iteration CUDA graph
#: (``cuda_graph_impl='full_iteration'``), with the attention's precision: ``'fp8'`` where the
#: recipe also sets ``fp8_dot_product_attention``. Read from Megatron-Bridge's recipes at the
#: release of each table: scripts/performance/configs/{deepseek,qwen,gpt_oss}/*workload_base_configs.py
#: at v0.5.0 (26.06; the *_FP8_MX_V1 and V2 configs) and src/megatron/bridge/perf_recipes/*/gb{200,300}
#: at v0.6.0 (26.08; _enable_deepseek_full_iteration_mxfp8, _enable_hybridep_full_iteration_mxfp8,
#: _apply_gpt_oss_120b_full_iter_fp8mx_configs). No recipe of 25.11 to 26.04 sets either, and
#: in 26.06 the B300 rows of DeepSeek-V3 and gpt-oss-120b and the Kimi K2 row keep the grouped GEMM.
_FUSED_EXPERT_RECIPES = {
    **{(rel, sys_, arch, "mxfp8"): attn
       for rel in ("26.06", "26.08")
       for (sys_, arch), attn in {("DGX-GB300", "DeepSeek-V3"): "fp8", ("DGX-GB200", "DeepSeek-V3"): "bf16",
                                  ("DGX-GB300", "Qwen3-235B-A22B"): "fp8", ("DGX-GB200", "Qwen3-235B-A22B"): "fp8",
                                  ("DGX-GB300", "Qwen3-30B-A3B"): "fp8", ("DGX-GB200", "Qwen3-30B-A3B"): "fp8",
                                  ("DGX-GB300", "gpt-oss-120b"): "fp8", ("DGX-GB200", "gpt-oss-120b"): "fp8"}.items()},
    ("26.06", "DGX-B300", "Qwen3-30B-A3B", "mxfp8"): "fp8",
}


def _bridge(release, system, arch, n, precision, gbs, mbs, seq, tp, pp, cp, vp, ep, tokens, zero=1, overlap="default",
            recompute="none", offload=0):
    """A row of the Megatron-Bridge performance summary (NVIDIA 2025-26): ``release`` the NeMo
    container whose table it is, ``system`` the DGX whose column, the layout (DP is what the
    GPUs leave: ``n / (tp pp cp)``, EP folded into it), the published tokens/s per GPU; the
    experts' kernels and the attention's precision as :data:`_FUSED_EXPERT_RECIPES` reads the
    row's recipe."""
    gpu = {"DGX-H100": "H100 SXM", "DGX-B200": "B200", "DGX-B300": "B300", "DGX-GB200": "GB200",
           "DGX-GB300": "GB300"}[system]
    a, params = _named_shape(arch)
    name = f"{arch}, {n} {gpu}, {precision.upper()} ({release})"
    fused = _FUSED_EXPERT_RECIPES.get((release, system, arch, precision))
    return PublishedRun(name, params, a.layers, a.d_model, a.heads, seq, a.vocab, gpu, None, None, tp, pp,
                        n // (tp * pp * cp), gbs, mbs, recompute, "nvidia2025megatronbridge", cp=cp, zero=zero,
                        schedule="interleaved" if vp > 1 else "1f1b", virtual_stages=vp, mlp="swiglu",
                        dropout=False, attention="flash", arch=arch, precision=precision, ep=ep,
                        tokens_per_s_per_gpu=tokens, flops_counted="model", overlap=overlap,
                        expert_kernels="fused" if fused is not None else "grouped",
                        attention_precision=fused or "bf16",
                        year=2025 + (release.startswith("26")), offload_layers=offload,
                        where=f"{release} NeMo container, {system}, row {arch} {precision.upper()}",
                        assumed=("Megatron-FSDP (ZeRO-3) with the activations of " f"{offload} layers offloaded to the "
                                 "host, as the recipe sets; " if zero == 3 else "ZeRO-1 (Megatron's distributed optimizer); ")
                        + "recomputation as the recipe sets it (none, or the modules its recompute_modules "
                          "names); MoE routing force-balanced, as the table's notes say"
                        + ("; the experts as one fused grouped MLP in a full-iteration CUDA graph"
                           + (" and FP8 attention" if fused == "fp8" else "") + ", as the recipe sets; its "
                           "overlap of the experts' all-to-all not modelled (left exposed, as on the two rows of the course's "
                           "table whose recipes overlap it too)"
                           if fused is not None else ""))


#: (release, system, shape, GPUs, precision, global batch, micro-batch, sequence, TP, PP, CP, VP, EP,
#: tokens/s per GPU), as printed in the Megatron-Bridge performance summary; then, where the
#: row's recipe sets them, ZeRO, overlap and recomputation. The recomputation is the recipe's
#: ``recompute_modules`` (:data:`solutions.layer_time.RECOMPUTE_MODULES`), read in Megatron-Bridge
#: at the release of each table (scripts/performance/configs/*/…workload_base_configs.py at
#: v0.2.0 for 25.11, v0.3.0 for 26.02, v0.4.0 for 26.04, v0.5.0 for 26.06; the perf_recipes at
#: v0.6.0 for 26.08): DeepSeek-V3 and Kimi K2 redo MLA's up-projections (DeepSeek-V3 on GB300 in
#: 25.11 the experts' activation, on GB200 in 26.04 the dense MLPs), gpt-oss-120b its norms and
#: experts' activation; none of them the attention core.
_BRIDGE_ROWS = (
    ("25.11", "DGX-H100", "Llama 3 70B", 64, "fp8", 128, 1, 8192, 4, 8, 1, 5, 1, 1602),
    ("25.11", "DGX-H100", "Llama 3 405B", 1024, "fp8", 512, 1, 8192, 8, 8, 2, 8, 1, 292),
    ("26.02", "DGX-H100", "Llama 3 405B", 1024, "fp8", 1536, 1, 8192, 8, 8, 2, 8, 1, 311),
    ("25.11", "DGX-B200", "Llama 3 8B", 8, "fp8", 128, 2, 8192, 1, 1, 1, 1, 1, 30624),
    ("25.11", "DGX-GB200", "Llama 3 8B", 8, "fp8", 128, 2, 8192, 1, 1, 1, 1, 1, 31508),
    ("25.11", "DGX-B200", "Llama 3 405B", 128, "fp8", 64, 1, 8192, 4, 8, 2, 8, 1, 661),
    ("25.11", "DGX-GB200", "Llama 3 405B", 256, "fp8", 1536, 1, 8192, 4, 16, 1, 4, 1, 813),
    ("25.11", "DGX-GB300", "Llama 3 405B", 256, "fp8", 1536, 1, 8192, 2, 8, 2, 4, 1, 999),
    ("26.02", "DGX-GB300", "Llama 3 70B", 64, "mxfp8", 256, 1, 8192, 1, 4, 1, 5, 1, 4596),
    ("26.02", "DGX-GB200", "Llama 3 70B", 64, "mxfp8", 256, 1, 8192, 2, 4, 1, 5, 1, 3613),
    ("26.02", "DGX-GB300", "Llama 3 70B", 64, "nvfp4", 256, 1, 8192, 1, 4, 1, 5, 1, 6798),
    ("26.02", "DGX-GB200", "Llama 3 70B", 64, "nvfp4", 256, 1, 8192, 2, 4, 1, 5, 1, 4458),
    ("25.11", "DGX-GB200", "DeepSeek-V3", 256, "bf16", 4096, 1, 4096, 1, 4, 1, 4, 64, 3139, 1, "default", "mla_up_proj"),
    ("25.11", "DGX-GB200", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 8, 1, 4, 32, 4018, 1, "default", "mla_up_proj"),
    ("25.11", "DGX-GB300", "DeepSeek-V3", 256, "bf16", 4096, 1, 4096, 1, 2, 1, 4, 32, 3848, 1, "default", "moe_act"),
    ("25.11", "DGX-GB200", "Qwen3-235B-A22B", 256, "bf16", 8192, 1, 4096, 1, 8, 1, 3, 32, 4916),
    ("25.11", "DGX-H100", "Qwen3-235B-A22B", 256, "fp8", 2048, 1, 4096, 2, 8, 1, 4, 32, 1575),
    ("25.11", "DGX-B200", "Qwen3-235B-A22B", 64, "mxfp8", 1024, 1, 4096, 1, 8, 1, 2, 8, 3269),
    ("25.11", "DGX-GB200", "Qwen3-30B-A3B", 8, "mxfp8", 512, 4, 4096, 1, 1, 1, 1, 8, 23766),
    ("25.11", "DGX-GB200", "gpt-oss-120b", 64, "bf16", 1280, 1, 8192, 1, 1, 1, 1, 64, 15876, 1, "default", "layernorm,moe_act"),
    # The 25.11 DGX-H100 row (GBS 512, MBS 4, PP4, GA 2, 5,630) cannot hold together: with PP4 and
    # DP16, MBS 4 x GA 2 x DP 16 is 128 sequences, not 512. The recipe it points to
    # (scripts/performance/configs/gpt_oss, H100 BF16) sets MBS 1, and the 26.02 table prints
    # that layout consistently: its row is the one kept.
    ("26.02", "DGX-H100", "gpt-oss-120b", 64, "bf16", 1280, 1, 4096, 1, 4, 1, 1, 8, 5993, 1, "default", "layernorm,moe_act"),
)


PUBLISHED_RUNS = (
    # Narayanan et al. 2021, Table 1 (weak scaling, 1.7B to 1T).
    _megatron(1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    _megatron(3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    _megatron(7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    _megatron(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    _megatron(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    _megatron(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    _megatron(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    _megatron(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    _megatron(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    _megatron(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
    # Narayanan et al. 2021, Table 2: GPT-3's shape (174.6B) under ZeRO-3 alone.
    PublishedRun("ZeRO-3 174.6B, 384 GPUs", 174.6e9, 96, 12288, 96, 2048, 51200, "A100 80GB", A100_NVLINK,
                 SELENE_NETWORK, 1, 1, 384, 1536, 4, "full", "narayanan2021megatron", zero=3, tflops_per_gpu=144,
                 assumed="full recomputation", sequence_parallel=False, overlap=_OVERLAP_ZERO3_2021,
                 where="Table 2, ZeRO-3 without model parallelism, 174.6B, 384 GPUs", nic_share="gpu"),
    PublishedRun("ZeRO-3 174.6B, 768 GPUs", 174.6e9, 96, 12288, 96, 2048, 51200, "A100 80GB", A100_NVLINK,
                 SELENE_NETWORK, 2, 1, 384, 1536, 2, "full", "narayanan2021megatron", zero=3, tflops_per_gpu=88,
                 assumed="full recomputation; the model-parallel size 2 taken as TP2", sequence_parallel=False,
                 overlap=_OVERLAP_ZERO3_2021, where="Table 2, ZeRO-3 without model parallelism, 174.6B, 768 GPUs", nic_share="gpu"),
    PublishedRun("ZeRO-3 174.6B, 1536 GPUs", 174.6e9, 96, 12288, 96, 2048, 51200, "A100 80GB", A100_NVLINK,
                 SELENE_NETWORK, 1, 1, 1536, 1536, 1, "full", "narayanan2021megatron", zero=3, tflops_per_gpu=44,
                 assumed="full recomputation", sequence_parallel=False, overlap=_OVERLAP_ZERO3_2021,
                 where="Table 2, ZeRO-3 without model parallelism, 174.6B, 1,536 GPUs", nic_share="gpu"),
    # Narayanan et al. 2021, Table 2: the same shapes with tensor and pipeline parallelism
    # (PTD-P: TP8 x PP12 for 174.6B, TP8 x PP35 for 529.6B), micro-batch 1 ...
    *(PublishedRun(f"PTD-P {p_b}B, {n:,} GPUs", p_b * 1e9, layers, hidden, heads, 2048, 51200, "A100 80GB",
                   A100_NVLINK, SELENE_NETWORK, 8, pp, n // (8 * pp), batch, 1, "full", "narayanan2021megatron",
                   tflops_per_gpu=x, assumed="full recomputation; the interleaved schedule of sec. 5.1's runs (sec. 5.2 "
                                                    "compares the same system), chunks per stage not published",
                   sequence_parallel=False,
                   schedule="interleaved", virtual_stages=None,
                   overlap=_OVERLAP_MEGATRON_2021, where=f"Table 2, PTD-P, {p_b}B, {n:,} GPUs")
      for p_b, layers, hidden, heads, pp, batch, n, x in (
          (174.6, 96, 12288, 96, 12, 1536, 384, 153), (174.6, 96, 12288, 96, 12, 1536, 768, 149),
          (174.6, 96, 12288, 96, 12, 1536, 1536, 141), (529.6, 105, 20480, 128, 35, 2240, 560, 171),
          (529.6, 105, 20480, 128, 35, 2240, 1120, 167), (529.6, 105, 20480, 128, 35, 2240, 2240, 159))),
    # ... and 529.6B under ZeRO-3 (on 640 GPUs with a batch of 2,560: 560 could not hold micro-batches of 4).
    *(PublishedRun(f"ZeRO-3 529.6B, {n:,} GPUs", 529.6e9, 105, 20480, 128, 2048, 51200, "A100 80GB", A100_NVLINK,
                   SELENE_NETWORK, tp, 1, n // tp, batch, b, "full", "narayanan2021megatron", zero=3,
                   tflops_per_gpu=x, assumed="full recomputation" + ("; the model-parallel size 2 taken as TP2"
                                                                      if tp > 1 else ""),
                   sequence_parallel=False, overlap=_OVERLAP_ZERO3_2021, where=f"Table 2, ZeRO-3, 529.6B, {n:,} GPUs", nic_share="gpu")
      for n, tp, batch, b, x in ((640, 1, 2560, 4, 138), (1120, 2, 2240, 2, 98), (2240, 1, 2240, 1, 48))),
    # Smith et al. 2022, sec. 3 and Table 1: MT-NLG 530B, 8-way TP x 35-way PP per replica,
    # batch 1,920 sequences of 2,048 tokens, on 280, 350 and 420 DGX A100 nodes.
    *(PublishedRun(f"MT-NLG 530B, {8 * 35 * d:,} GPUs", 530e9, 105, 20480, 128, 2048, 51200, "A100 80GB",
                   A100_NVLINK, SELENE_NETWORK, 8, 35, d, 1920, 1, "full", "smith2022mtnlg", tflops_per_gpu=x,
                   assumed="micro-batch 1; vocabulary padded to 51,200 as in Megatron-LM",
                   note=_DEEPSPEED_PIPE_NOTE,
                   sequence_parallel=False, overlap=_OVERLAP_DEEPSPEED_PIPE, year=2022,
                   where=f"sec. 3.3, throughput on {35 * d} DGX A100 nodes")
      for d, x in ((8, 126), (10, 121), (12, 113))),
    # Le Scao et al. 2022 (BLOOM), sec. 3.4: 384 A100 80GB, TP4 x PP12 x DP8, ZeRO-1,
    # 2,048 sequences of 2,048 tokens; "about 150 TFLOPs" per GPU (BigScience 2022). The run's
    # launch script (bigscience2022tr11) sets micro-batches of 2 sequences ("was MBS=1 till
    # GBS=784", i.e. during the batch ramp) and --checkpoint-activations (full recomputation).
    PublishedRun("BLOOM 176B", 176.2e9, 70, 14336, 112, 2048, 250_880, "A100 80GB", A100_NVLINK,
                 JEAN_ZAY_NETWORK, 4, 12, 8, 2048, 2, "full", "lescao2022bloom", zero=1, tflops_per_gpu=150,
                 note="throughput from bigscience2022bloomtraining; micro-batch and recomputation from the "
                      "launch script, bigscience2022tr11; " + _DEEPSPEED_PIPE_NOTE,
                 sequence_parallel=False, overlap=_OVERLAP_DEEPSPEED_PIPE, year=2022,
                 where="sec. 3.4 (layout), the launch script (micro-batch, recomputation) and the "
                       "training chronicle (throughput)"),
    # Dubey et al. 2024, Table 4: Llama 3 405B on H100s, 16M-token batches,
    # BF16 MFU; interleaved 1F1B (sec. 3.3.2), no activation checkpointing at 8K.
    *(PublishedRun(f"Llama 3 405B, {n:,} GPUs{', 128K context' if cp > 1 else ''}", 405e9, 126, 16384, 128, s,
                   128_000, "H100 SXM", H100_NVLINK, LLAMA3_NETWORK, 8, 16, dp, dp * per_dp, 1, "none",
                   "dubey2024llama3", cp=cp, zero=2, schedule="interleaved", virtual_stages=None, kv_heads=8,
                   ffn_hidden=53248, mlp="swiglu", dropout=False, attention="flash", tflops_per_gpu=tf,
                   flops_counted="model", mfu=mfu, year=2024, where=f"Table 4, {n:,} GPUs, CP{cp}",
                   overlap="tp,pp,dp",
                   assumed="micro-batch 1; FSDP sharding optimizer state and gradients without resharding the "
                           "weights after the forward pass (sec. 3.3.2), read as ZeRO-2; chunks per stage not published; "
                           "the overlaps of a 2024 production stack, except context parallelism's all-gather of "
                           "keys and values, which sec. 3.3.2 says is exposed")
      for n, cp, dp, s, per_dp, tf, mfu in ((8192, 1, 64, 8192, 32, 430, 0.43), (16384, 1, 128, 8192, 16, 400, 0.41),
                                            (16384, 16, 8, 131_072, 16, 380, 0.38))),
    # NVIDIA's Megatron-Bridge performance tables (NeMo containers 25.11 and 26.02): tokens/s
    # per GPU as published, with the layout, batch and precision of the row.
    *(_bridge(*row) for row in _BRIDGE_ROWS),
    # DeepSeek-V3 (Liu et al. 2024), Table 1: 2,664K H800 GPU-hours of pre-training for
    # 14.8T tokens, i.e. 14.8e12 / (2.664e6 x 3,600) tokens/s per GPU; 2,048 GPUs, PP16 with
    # DualPipe, EP64 over 8 nodes, ZeRO-1 over DP128, no TP (sec. 3.2); FP8 (sec. 3.3);
    # 4K-token sequences and a batch that ramps to 15,360 (sec. 4.2).
    PublishedRun("DeepSeek-V3, 2,048 H800", 671e9, 61, 7168, 128, 4096, 129280, "H800", None, None, 1, 16, 128,
                 15360, 1, "layernorm,mla_up_proj", "liu2024deepseekv3", zero=1, arch="DeepSeek-V3", precision="fp8", ep=64,
                 mlp="swiglu", dropout=False, attention="flash", tokens_per_s_per_gpu=14.8e12 / (2.664e6 * 3600),
                 overlap="default,ep", year=2025, flops_counted="model",
                 where="Table 1 (pre-training GPU-hours), sec. 3.2-3.3 (layout, FP8), sec. 4.2 (batch)",
                 assumed="micro-batch 1; the final batch of 15,360 throughout; DualPipe read as 1F1B with the "
                         "all-to-alls hidden (its point); the multi-token-prediction module not counted",
                 note="recomputation of the RMSNorms and MLA's up-projections only, as sec. 3.2.3 says"),
)

#: Rows of the Megatron-Bridge tables (NeMo 25.11, 26.02, 26.04, 26.06 and 26.08) that the
#: calibration never sees: every pre-training row of those tables not in :data:`PUBLISHED_RUNS`
#: whose shape the course knows, as printed (columns as :data:`_BRIDGE_ROWS`, then ZeRO stage,
#: overlap, recomputation and offloaded layers where the row's recipe sets them). FSDP rows are
#: ZeRO-3; the Llama 3 70B FSDP recipes offload 20 (GB300) and 40 (GB200) layers' activations to
#: the Grace CPU (scripts/performance/configs/llama in Megatron-Bridge, December 2025 to April
#: 2026). Recomputation is read from the recipe the row's container shipped (the release tag for
#: 26.04, src/megatron/bridge/perf_recipes for 26.08); a recipe that asks for selective
#: recomputation of an empty list of modules recomputes nothing. The B200 DeepSeek-V3 row of
#: 25.11 (with multi-token prediction), 26.06's DeepSeek-V3 row at a batch of 15,360 and the
#: Nemotron and DeepSeek-V4 rows (shapes the course lacks) are left out; the tables' ".01"
#: re-releases are not taken.
_HELDOUT_ROWS = (
    ("25.11", "DGX-GB300", "Llama 3 8B", 8, "fp8", 128, 2, 8192, 1, 1, 1, 1, 1, 37556),
    ("25.11", "DGX-GB300", "Llama 3 70B", 64, "fp8", 256, 2, 8192, 1, 1, 1, 1, 1, 4520, 3, "default", "none", 20),
    ("25.11", "DGX-GB200", "Llama 3 70B", 64, "fp8", 256, 2, 8192, 1, 1, 1, 1, 1, 4312, 3, "default", "none", 40),
    ("25.11", "DGX-H100", "Llama 3 8B", 8, "fp8", 128, 1, 8192, 1, 1, 1, 1, 1, 14451, 3),
    ("25.11", "DGX-GB300", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 2, 1, 4, 32, 4357, 1, "default", "moe_act"),
    ("25.11", "DGX-GB300", "gpt-oss-120b", 64, "bf16", 1280, 2, 8192, 1, 1, 1, 1, 64, 18347),
    ("25.11", "DGX-B200", "gpt-oss-120b", 64, "bf16", 512, 4, 4096, 1, 1, 1, 1, 8, 8213, 1, "default", "layernorm,moe_act"),
    ("25.11", "DGX-GB300", "Qwen3-30B-A3B", 8, "mxfp8", 512, 4, 4096, 1, 1, 1, 1, 8, 28934),
    ("25.11", "DGX-B200", "Qwen3-30B-A3B", 8, "mxfp8", 512, 1, 4096, 1, 1, 1, 1, 8, 9299),
    ("25.11", "DGX-GB300", "Qwen3-235B-A22B", 256, "bf16", 8192, 2, 4096, 1, 4, 1, 12, 16, 6131),
    ("25.11", "DGX-H100", "Qwen3-30B-A3B", 16, "fp8", 512, 2, 4096, 1, 2, 1, 24, 8, 5275),
    ("26.02", "DGX-GB300", "Llama 3 70B", 64, "fp8", 256, 2, 8192, 1, 1, 1, 1, 1, 5003, 3, "default", "none", 20),
    ("26.02", "DGX-GB200", "Llama 3 70B", 64, "fp8", 256, 2, 8192, 1, 1, 1, 1, 1, 4040, 3, "default", "none", 40),
    ("26.02", "DGX-H100", "Llama 3 70B", 64, "fp8", 256, 1, 8192, 4, 8, 1, 5, 1, 1621),
    ("26.02", "DGX-GB300", "Llama 3 405B", 256, "nvfp4", 1536, 1, 8192, 4, 8, 1, 4, 1, 1333),
    ("26.02", "DGX-GB200", "Llama 3 405B", 256, "nvfp4", 1536, 1, 8192, 4, 16, 1, 8, 1, 1076),
    ("26.02", "DGX-GB300", "Llama 3 405B", 256, "mxfp8", 1536, 1, 8192, 2, 8, 2, 4, 1, 931),
    ("26.02", "DGX-GB200", "Llama 3 405B", 256, "mxfp8", 1536, 1, 8192, 4, 16, 1, 8, 1, 786),
    ("26.02", "DGX-GB300", "Llama 3 405B", 256, "fp8", 1536, 1, 8192, 4, 8, 1, 4, 1, 988),
    ("26.02", "DGX-GB200", "Llama 3 405B", 256, "fp8", 1536, 1, 8192, 4, 16, 1, 4, 1, 793),
    ("26.02", "DGX-GB300", "DeepSeek-V3", 256, "mxfp8", 4096, 2, 4096, 1, 2, 1, 8, 32, 4612, 1, "default", "mla_up_proj"),
    ("26.02", "DGX-GB200", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 4, 1, 4, 64, 3955, 1, "default", "mla_up_proj"),
    ("26.02", "DGX-B300", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 16, 1, 1, 8, 2983, 1, "default", "mla_up_proj"),
    ("26.02", "DGX-B200", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 16, 1, 1, 8, 2689, 1, "default", "mla_up_proj"),
    ("26.02", "DGX-GB300", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 1, 1, 1, 1, 64, 19412),
    ("26.02", "DGX-GB200", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 1, 1, 1, 1, 64, 15784, 1, "default", "layernorm,moe_act"),
    ("26.02", "DGX-B300", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 1, 1, 1, 1, 64, 8359),
    ("26.02", "DGX-B200", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 1, 1, 1, 1, 64, 8047, 1, "default", "layernorm,moe_act"),
    ("26.02", "DGX-GB300", "Qwen3-30B-A3B", 8, "mxfp8", 512, 8, 4096, 1, 1, 1, 1, 8, 30376),
    ("26.02", "DGX-GB200", "Qwen3-30B-A3B", 8, "mxfp8", 512, 4, 4096, 1, 1, 1, 1, 8, 26084),
    ("26.02", "DGX-B300", "Qwen3-30B-A3B", 8, "mxfp8", 512, 8, 4096, 1, 1, 1, 1, 8, 29521),
    ("26.02", "DGX-B200", "Qwen3-30B-A3B", 8, "mxfp8", 512, 1, 4096, 1, 1, 1, 1, 8, 9691),
    ("26.02", "DGX-H100", "Qwen3-30B-A3B", 16, "fp8", 1024, 1, 4096, 1, 2, 1, 12, 8, 5113),
    ("26.02", "DGX-GB300", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 2, 4096, 1, 4, 1, 1, 32, 6583),
    ("26.02", "DGX-GB200", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 1, 4096, 1, 8, 1, 1, 32, 5448),
    ("26.02", "DGX-B300", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 1, 4096, 1, 8, 1, 4, 8, 2691),
    ("26.02", "DGX-B200", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 1, 4096, 1, 8, 1, 1, 8, 3805),
    ("26.02", "DGX-H100", "Qwen3-235B-A22B", 256, "fp8", 8192, 1, 4096, 2, 8, 1, 4, 32, 1633),
    # The 26.04 table (April 2026).
    ("26.04", "DGX-GB300", "Llama 3 70B", 64, "nvfp4", 256, 1, 8192, 1, 4, 1, 5, 1, 7397),
    ("26.04", "DGX-GB200", "Llama 3 70B", 64, "nvfp4", 256, 1, 8192, 2, 4, 1, 5, 1, 4898),
    ("26.04", "DGX-GB300", "Llama 3 70B", 64, "mxfp8", 256, 1, 8192, 1, 4, 1, 5, 1, 4742),
    ("26.04", "DGX-GB200", "Llama 3 70B", 64, "mxfp8", 256, 1, 8192, 2, 4, 1, 5, 1, 3828),
    ("26.04", "DGX-GB300", "Llama 3 70B", 64, "fp8", 256, 2, 8192, 1, 1, 1, 1, 1, 5243, 3, "default", "none", 20),
    ("26.04", "DGX-GB200", "Llama 3 70B", 64, "fp8", 256, 2, 8192, 1, 1, 1, 1, 1, 4143, 3, "default", "none", 40),
    ("26.04", "DGX-H100", "Llama 3 70B", 64, "fp8", 256, 1, 8192, 4, 8, 1, 5, 1, 1633),
    ("26.04", "DGX-GB300", "Llama 3 405B", 256, "nvfp4", 1536, 1, 8192, 4, 8, 1, 4, 1, 1424),
    ("26.04", "DGX-GB200", "Llama 3 405B", 256, "nvfp4", 1536, 1, 8192, 4, 16, 1, 8, 1, 1136),
    ("26.04", "DGX-GB300", "Llama 3 405B", 256, "mxfp8", 1536, 1, 8192, 2, 8, 2, 4, 1, 968),
    ("26.04", "DGX-GB200", "Llama 3 405B", 256, "mxfp8", 1536, 1, 8192, 4, 16, 1, 8, 1, 793),
    ("26.04", "DGX-GB300", "Llama 3 405B", 256, "fp8", 1536, 1, 8192, 4, 8, 1, 4, 1, 1036),
    ("26.04", "DGX-GB200", "Llama 3 405B", 256, "fp8", 1536, 1, 8192, 4, 16, 1, 4, 1, 842),
    ("26.04", "DGX-GB300", "DeepSeek-V3", 256, "mxfp8", 4096, 2, 4096, 1, 2, 1, 8, 32, 4965, 1, "default", "mla_up_proj"),
    ("26.04", "DGX-GB200", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 4, 1, 4, 64, 4193, 1, "default", "mlp"),
    ("26.04", "DGX-B300", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 16, 1, 1, 8, 3131, 1, "default", "mla_up_proj"),
    ("26.04", "DGX-B200", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 16, 1, 1, 8, 2815, 1, "default", "mla_up_proj"),
    ("26.04", "DGX-GB300", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 1, 1, 1, 1, 64, 19275),
    ("26.04", "DGX-GB200", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 1, 1, 1, 1, 64, 15938, 1, "default", "layernorm,moe_act"),
    ("26.04", "DGX-B300", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 1, 1, 1, 1, 8, 15114),
    ("26.04", "DGX-B200", "gpt-oss-120b", 64, "bf16", 1280, 4, 4096, 1, 1, 1, 1, 8, 13045, 1, "default", "layernorm,moe_act"),
    ("26.04", "DGX-H100", "gpt-oss-120b", 64, "bf16", 1280, 1, 4096, 1, 4, 1, 1, 8, 5810, 1, "default", "layernorm,moe_act"),
    ("26.04", "DGX-GB300", "Qwen3-30B-A3B", 8, "mxfp8", 512, 8, 4096, 1, 1, 1, 1, 8, 31470),
    ("26.04", "DGX-GB200", "Qwen3-30B-A3B", 8, "mxfp8", 512, 4, 4096, 1, 1, 1, 1, 8, 26032),
    ("26.04", "DGX-B300", "Qwen3-30B-A3B", 8, "mxfp8", 512, 8, 4096, 1, 1, 1, 1, 8, 30553),
    ("26.04", "DGX-B200", "Qwen3-30B-A3B", 8, "mxfp8", 512, 4, 4096, 1, 1, 1, 1, 8, 26859),
    ("26.04", "DGX-H100", "Qwen3-30B-A3B", 16, "fp8", 1024, 1, 4096, 1, 1, 1, 1, 16, 8901),
    ("26.04", "DGX-GB300", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 2, 4096, 1, 4, 1, 12, 32, 6994),
    ("26.04", "DGX-GB200", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 1, 4096, 1, 8, 1, 3, 32, 5672),
    ("26.04", "DGX-B300", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 2, 4096, 1, 8, 1, 1, 8, 4865),
    ("26.04", "DGX-H100", "Qwen3-235B-A22B", 256, "fp8", 8192, 1, 4096, 2, 8, 1, 4, 32, 1686),
    ("26.04", "DGX-GB300", "Kimi K2", 256, "mxfp8", 4096, 2, 4096, 1, 4, 1, 4, 64, 5332, 1, "default", "mla_up_proj"),
    # The 26.06 table (June 2026): the same models six months of software later.
    ("26.06", "DGX-GB300", "Llama 3 405B", 256, "fp8", 1536, 1, 8192, 4, 8, 1, 4, 1, 1048),
    ("26.06", "DGX-GB300", "Llama 3 405B", 256, "mxfp8", 1536, 1, 8192, 2, 8, 2, 4, 1, 952),
    ("26.06", "DGX-GB300", "Llama 3 405B", 256, "nvfp4", 1536, 1, 8192, 4, 8, 1, 4, 1, 1413),
    ("26.06", "DGX-GB200", "Llama 3 405B", 256, "fp8", 1536, 1, 8192, 4, 16, 1, 4, 1, 843),
    ("26.06", "DGX-GB200", "Llama 3 405B", 256, "mxfp8", 1536, 1, 8192, 4, 16, 1, 8, 1, 783),
    ("26.06", "DGX-GB200", "Llama 3 405B", 256, "nvfp4", 1536, 1, 8192, 4, 16, 1, 8, 1, 1166),
    ("26.06", "DGX-H100", "Llama 3 405B", 1024, "fp8", 1536, 1, 8192, 8, 8, 2, 8, 1, 326),
    ("26.06", "DGX-GB300", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 2, 1, 8, 32, 6338),
    ("26.06", "DGX-GB200", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 4, 1, 4, 64, 4969, 1, "default", "mla_up_proj"),
    ("26.06", "DGX-B300", "DeepSeek-V3", 256, "mxfp8", 4096, 2, 4096, 1, 8, 1, 1, 8, 3541, 1, "default", "mla_up_proj"),
    ("26.06", "DGX-GB300", "gpt-oss-120b", 64, "mxfp8", 1280, 4, 4096, 1, 1, 1, 1, 16, 33166),
    ("26.06", "DGX-GB200", "gpt-oss-120b", 64, "mxfp8", 1280, 4, 4096, 1, 1, 1, 1, 64, 28947),
    ("26.06", "DGX-B300", "gpt-oss-120b", 64, "mxfp8", 1280, 4, 4096, 1, 1, 1, 1, 8, 18534),
    ("26.06", "DGX-GB300", "Qwen3-30B-A3B", 8, "mxfp8", 512, 8, 4096, 1, 1, 1, 1, 8, 45275),
    ("26.06", "DGX-GB200", "Qwen3-30B-A3B", 8, "mxfp8", 512, 4, 4096, 1, 1, 1, 1, 8, 40706),
    ("26.06", "DGX-B300", "Qwen3-30B-A3B", 8, "mxfp8", 512, 8, 4096, 1, 1, 1, 1, 8, 40769),
    ("26.06", "DGX-H100", "Qwen3-30B-A3B", 16, "fp8", 1024, 1, 4096, 1, 1, 1, 1, 16, 8826),
    ("26.06", "DGX-GB300", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 2, 4096, 1, 4, 1, 12, 32, 9015),
    ("26.06", "DGX-GB200", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 1, 4096, 1, 8, 1, 3, 32, 7376),
    ("26.06", "DGX-GB300", "Kimi K2", 256, "mxfp8", 4096, 2, 4096, 1, 4, 1, 4, 64, 5372, 1, "default", "mla_up_proj"),
    # The 26.08 table (August 2026): MoE rows only.
    ("26.08", "DGX-GB300", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 2, 1, 8, 32, 6288),
    ("26.08", "DGX-GB200", "DeepSeek-V3", 256, "mxfp8", 4096, 1, 4096, 1, 4, 1, 4, 64, 4912, 1, "default", "mla_up_proj"),
    ("26.08", "DGX-GB300", "gpt-oss-120b", 64, "mxfp8", 1280, 4, 4096, 1, 1, 1, 1, 16, 33024),
    ("26.08", "DGX-GB200", "gpt-oss-120b", 64, "mxfp8", 1280, 4, 4096, 1, 1, 1, 1, 64, 28672),
    ("26.08", "DGX-GB300", "Qwen3-30B-A3B", 8, "mxfp8", 512, 8, 4096, 1, 1, 1, 1, 8, 44544),
    ("26.08", "DGX-GB200", "Qwen3-30B-A3B", 8, "mxfp8", 512, 4, 4096, 1, 1, 1, 1, 8, 39936),
    ("26.08", "DGX-GB300", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 2, 4096, 1, 4, 1, 12, 32, 8816),
    ("26.08", "DGX-GB200", "Qwen3-235B-A22B", 256, "mxfp8", 8192, 1, 4096, 1, 8, 1, 3, 32, 7280),
)

#: The held-out runs: judged, never fitted (:func:`solutions.calibration.heldout`).
HELDOUT_RUNS = tuple(_bridge(*row) for row in _HELDOUT_ROWS)


def _fsdp_stack(stack, cite, where, arch, gpu, n, precision, gbs, mbs, seq, pp, cp, vp, ep, tokens, recompute,
                assumed, memory_gib=None):
    """A pre-training row of a PyTorch-native stack: FSDP2 (ZeRO-3) over what the pipeline and
    context split leave, no tensor parallelism, EP folded into the FSDP ranks, the tokens/s
    per GPU as published; recomputation as the row's recipe sets it."""
    a, params = _named_shape(arch)
    return PublishedRun(f"{arch}, {n} {gpu}, {precision.upper()} ({stack})", params, a.layers, a.d_model, a.heads,
                        seq, a.vocab, gpu, None, None, 1, pp, n // (pp * cp), gbs, mbs, recompute, cite, cp=cp,
                        zero=3, schedule="interleaved" if vp > 1 else "1f1b", virtual_stages=vp, mlp="swiglu",
                        dropout=False, attention="flash", arch=arch, precision=precision, ep=ep,
                        tokens_per_s_per_gpu=tokens, flops_counted="model", year=2025, where=where, memory_gib=memory_gib,
                        assumed="FSDP2 read as ZeRO-3 with its gathers prefetched behind compute; " + assumed)


def _primus(arch, gpu, precision, mbs, gbs, pp, vp, ep, zero, recompute, tokens, container, assumed):
    """A pre-training row of AMD's Primus (Megatron-LM backend) on 64 Instinct GPUs (8 nodes),
    as AMD's performance results page published it (quoted, with its container and date, by
    AMD's Primus projection blog): 8,192-token sequences, no tensor parallelism, the tokens/s
    per GPU; the global batch and the recomputation as the Primus recipe of the model sets them
    where the row does not say."""
    a, params = _named_shape(arch)
    n = 64
    return PublishedRun(f"{arch}, {n} {gpu}, {precision.upper()} (Primus)", params, a.layers, a.d_model, a.heads,
                        8192, a.vocab, gpu, None, None, 1, pp, n // pp, gbs, mbs, recompute, "amd2026primusprojection",
                        zero=zero, schedule="interleaved" if vp > 1 else "1f1b", virtual_stages=vp, mlp="swiglu",
                        dropout=False, attention="flash", arch=arch, precision=precision, ep=ep,
                        tokens_per_s_per_gpu=tokens, flops_counted="model", year=2026,
                        where=f"validation table, {gpu}, row {arch} {precision.upper()} ({container})",
                        assumed=assumed)


#: AMD's Primus on MI325X and MI355X (AMD's performance results page as the Primus projection
#: blog of May 2026 quotes it: containers rocm/primus v26.1 and v26.2): the layouts and
#: micro-batches ("Batch") as printed. Not printed, and read from the Primus recipes
#: (examples/megatron/configs/MI300X and MI355X): the 70B rows' recomputation (full, all 80
#: layers, under FSDP2) and the Mixtral row's global batch (128) and recomputation (none); the
#: Llama rows' global batch, taken as one micro-batch per GPU per step (the throughput of a
#: layout without pipeline stages barely depends on it). Llama 3.1's shapes are Llama 3's.
_AMD_ROWS = (
    _primus("Llama 3 8B", "MI325X", "fp8", 2, 128, 1, 1, 1, 1, "none", 16186, "rocm/primus:v26.1",
            "the distributed optimizer (ZeRO-1) of Megatron-LM; FP8 the recipe's hybrid delayed scaling"),
    _primus("Llama 3 70B", "MI325X", "fp8", 4, 256, 1, 1, 1, 3, "full", 1726, "rocm/primus:v26.1",
            "FSDP2 read as ZeRO-3; full recomputation of every layer, as the recipe sets"),
    _primus("Llama 3 70B", "MI325X", "bf16", 1, 64, 1, 1, 1, 3, "full", 1174, "rocm/primus:v26.1",
            "FSDP2 read as ZeRO-3; full recomputation of every layer, as the recipe sets"),
    _primus("Mixtral 8x22B", "MI355X", "bf16", 1, 128, 4, 2, 8, 1, "none", 3475, "rocm/primus:v26.2",
            "the distributed optimizer (ZeRO-1); routing force-balanced, no recomputation, as the recipe sets"),
)

#: What AMD's own projection tool (Primus projection, which times one layer of each kind on a
#: node of the same GPUs and models the rest) predicted for the same rows, tokens/s per GPU,
#: from the same table of the same blog.
AMD_PROJECTION = {"Llama 3 8B, 64 MI325X, FP8 (Primus)": 17787, "Llama 3 70B, 64 MI325X, FP8 (Primus)": 1872,
                  "Llama 3 70B, 64 MI325X, BF16 (Primus)": 1096, "Mixtral 8x22B, 64 MI355X, BF16 (Primus)": 3426,
                  "cite": "amd2026primusprojection", "where": "section Validation: Projected vs. Measured Results"}


#: Pre-training rows of three other software stacks, judged and never fitted: the calibration's
#: rows all ran Megatron-LM, Megatron-Core or DeepSpeed. NVIDIA's NeMo AutoModel (PyTorch's
#: FSDP2 with Transformer Engine kernels and DeepEP; performance summary of October 2025 to
#: April 2026, DGX-H100, BF16, routing force-balanced, recomputation from the benchmark recipe
#: each row links) and torchtitan on 4 and 8 HGX H200 nodes (Trainy, June 2025: FSDP over all
#: GPUs, torch.compile, Float8 linear layers with FP8 weight gathers, per-op selective
#: recomputation, the llama3_8b preset's 8,192-token sequences); and AMD's Primus on Instinct
#: GPUs (:data:`_AMD_ROWS`: Megatron-LM with AMD's kernels and RCCL, whose hardware no row of
#: the calibration ran on). Left out: AutoModel's
#: gpt-oss-120b row (its EP column is empty while the recipe it links sets 64, and the recipe
#: of its date had another layout), its Nemotron rows (Mamba layers the course cannot express)
#: and torchtitan's Grand Teton tables (500 W H100s with HBM2e, whose peak, in the table's own
#: words, is not known).
OTHER_STACK_RUNS = (
    *(_fsdp_stack("AutoModel", "nvidia2025automodel", f"pre-training table, DGX-H100 BF16, row {arch} {n} GPUs",
                  arch, "H100 SXM", n, "bf16", gbs, mbs, seq, pp, cp, vp, ep, tokens, "full",
                  "activation checkpointing of every layer, as the linked recipe sets" + extra)
      for arch, n, gbs, mbs, seq, pp, cp, vp, ep, tokens, extra in (
          ("DeepSeek-V3", 1024, 8192, 1, 4096, 4, 1, 8, 64, 865,
           " (deepseek_v3_te_deepep.yaml, the only DeepSeek-V3 recipe when the row was published; a "
           "deepseek_v3_te_deepep_1024.yaml of April 2026, which the summary does not link, drops it)"),
          ("DeepSeek-V3", 256, 512, 1, 4096, 4, 1, 8, 64, 1002, ""),
          ("Kimi K2", 256, 512, 1, 4096, 8, 1, 4, 32, 924, ""),
          ("Qwen3-30B-A3B", 8, 512, 4, 4096, 1, 1, 1, 8, 12040, ""),
          ("Llama 3 70B", 64, 128, 1, 8192, 1, 2, 1, 1, 866.77, ""))),
    *(_fsdp_stack("torchtitan", "trainy2025torchtitan", f"results table, {n // 8} nodes", "Llama 3 8B", "H200", n,
                  "fp8", 2 * n, 2, 8192, 1, 1, 1, 1, tokens, "selective",
                  "torchtitan's per-op selective recomputation read as selective; FP8 the tensorwise recipe",
                  memory_gib=memory)
      for n, tokens, memory in ((32, 10938, 47.96), (64, 10753, 46.97))),
    *_AMD_ROWS,
)

#: The Megatron-Bridge tables of the 26.06 and 26.06.01 NeMo containers (DGX-GB200, 64 GPUs,
#: MXFP8, gpt-oss-120b): tokens/s per GPU before and after a regression the later table's
#: footnote traces to cudnn-frontend issue 256, which reports cuDNN's fused grouped product
#: with the GLU's backward (``grouped_gemm_dglu_wrapper_sm100``, the experts' backward pass on
#: Blackwell) about ten times slower from cudnn-frontend 1.24: how much one kernel moves this model.
GPT_OSS_KERNEL_REGRESSION = {"before": 28947, "after": 18304, "cite": "nvidia2025megatronbridge",
                             "kernel_cite": "cudnnfrontend2026issue256",
                             "where": "26.06 and 26.06.01 NeMo containers, DGX-GB200 MXFP8 rows and footnote"}

#: Fused attention with gpt-oss's learned sinks: Transformer Engine's FusedAttention backend runs
#: sink attention (forward and backward, BF16/FP16) from its 2.8 release, on cuDNN 9.13.1 or newer
#: (NVIDIA/TransformerEngine pull request 2148, labelled 2.8.0); NVIDIA's NeMo container carried
#: cuDNN 9.13.1 (version 91310) in December 2025, where Megatron-Bridge ran gpt-oss with
#: FusedAttention and an older cuDNN fell back to unfused attention (NVIDIA-NeMo/RL issue 1685,
#: 2025-12-22).
GPT_OSS_SINK_ATTENTION = {"te_release": "2.8", "cudnn_min": "9.13.1", "te_cite": "te2025sinks",
                          "container_cudnn": "9.13.1", "container_when": "December 2025",
                          "container_cite": "nemorl2025issue1685"}

#: How gpt-oss-120b's recipe for 64 GB200s (BF16, global batch 1,280) dispatched its tokens, by
#: release: Megatron-Core's default all-to-all over NCCL in 26.02, NVIDIA's Hybrid-EP with the
#: all-to-all overlapped in 26.04 (``moe_flex_dispatcher_backend='hybridep'``,
#: ``moe_a2a_overlap=True`` in GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2 of Megatron-Bridge's
#: scripts/performance/configs/gpt_oss at v0.4.0; the same config at v0.3.0 sets neither). The
#: rows of the two tables are in :data:`HELDOUT_RUNS`.
GPT_OSS_GB200_DISPATCH = {"26.02": {"dispatcher": "alltoall", "a2a_overlap": False},
                          "26.04": {"dispatcher": "hybridep", "a2a_overlap": True},
                          "cite": "nvidia2025megatronbridge",
                          "where": "scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py, "
                                   "v0.3.0 and v0.4.0"}

#: NVIDIA's 2026 report on mixture-of-experts training with Megatron-Core (arXiv 2603.07685,
#: abstract): model TFLOP/s per GPU, counted as the report counts them, on GB300 and GB200.
MCORE_MOE_REPORT_TFLOPS = {"DeepSeek-V3": {"GB300": 1233, "GB200": 1048},
                           "Qwen3-235B-A22B": {"GB300": 974, "GB200": 919},
                           "cite": "nvidia2026megatronmoe", "where": "abstract"}

#: Megatron-Bridge's MoE optimization guide (v0.6.0, "Parallel Folding"): 256 GPUs whose
#: attention layers run TP4 x CP2 x DP8 x PP4 and whose experts run EP64 with ETP1; without
#: folding, expert parallelism is carved out of data parallelism alone (EP at most DP).
PARALLEL_FOLDING_EXAMPLE = {"gpus": 256, "tp": 4, "cp": 2, "dp": 8, "pp": 4, "ep": 64, "etp": 1,
                            "cite": "nvidia2026moeoptimization", "where": "section Parallel Folding"}

#: Narayanan et al. 2021, sec. 5.1 (eq. 4, ``8 T P / (n X)``): their estimates of
#: days to train at the throughput they measured.
MEGATRON_TRAINING_ESTIMATES = (
    {"params": 175e9, "tokens": 300e9, "gpus": 1024, "tflops_per_gpu": 140, "days": 34, "cite": "narayanan2021megatron"},
    {"params": 1e12, "tokens": 450e9, "gpus": 3072, "tflops_per_gpu": 163, "days": 84, "cite": "narayanan2021megatron"},
)


# --------------------------------------------------------------------------
# FP8 recipes, pipeline schedules and attention variants of 2024-2025
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class FP8Recipe:
    """How a training recipe uses 8-bit floats: the format of the forward
    tensors (weights, activations) and of the gradients, how scale factors are
    chosen (``scaling``: "delayed" from the amax history of earlier steps,
    "current" from the tensor itself), the tile of an activation and the block
    of a weight that share one scale (``None``: one scale per tensor), how
    many products are accumulated before promotion to fp32, and what is
    communicated in FP8."""

    name: str
    forward_format: str
    gradient_format: str
    scaling: str
    cite: str
    activation_tile: Optional[tuple] = None
    weight_block: Optional[tuple] = None
    fp32_promotion_interval: Optional[int] = None
    fp8_communication: str = ""


FP8_RECIPES = {
    r.name: r
    for r in (
        # Micikevicius et al. 2022, sec. 3-4: E4M3 for weights and activations,
        # E5M2 for gradients, one scale per tensor.
        FP8Recipe("FP8 formats proposal (2022)", "E4M3", "E5M2", "per tensor", "micikevicius2022fp8"),
        # Transformer Engine's DelayedScaling recipe (its default on Hopper):
        # E4M3 forward, E5M2 backward ("HYBRID"), the scale from the largest
        # amax over a window of earlier iterations.
        FP8Recipe("Transformer Engine, delayed scaling", "E4M3", "E5M2", "delayed", "nvidia2025te"),
        # Transformer Engine's Float8CurrentScaling: the scale from the amax of
        # the tensor being cast, at the cost of one more pass over it.
        FP8Recipe("Transformer Engine, current scaling", "E4M3", "E5M2", "current", "nvidia2025te"),
        # DeepSeek-V3 report, sec. 3.3.1-3.3.3: E4M3 on all tensors, scales per
        # 1x128 activation tile and per 128x128 weight block computed online,
        # partial sums promoted to fp32 every 128 elements (4 WGMMAs); the
        # activations before the MoE up-projection are dispatched in FP8, the
        # combines stay in BF16.
        FP8Recipe("DeepSeek-V3", "E4M3", "E4M3", "current", "liu2024deepseekv3",
                  activation_tile=(1, 128), weight_block=(128, 128), fp32_promotion_interval=128,
                  fp8_communication="MoE dispatch (forward and its backward counterpart); combines in BF16"),
    )
}

#: Element sizes of DeepSeek-V3's expert-parallel all-to-alls (report
#: sec. 3.3.3): towards the experts in FP8, back (combine) in BF16.
DEEPSEEK_V3_ALL_TO_ALL_BYTES = {"dispatch": 1, "combine": 2, "cite": "liu2024deepseekv3"}


@dataclass(frozen=True)
class PipelineSchedule:
    """A pipeline schedule as its paper describes it: model chunks per GPU,
    copies of the parameters each GPU keeps, pipeline traffic relative to
    1F1B, activation memory of the first stage in micro-batches of a whole
    stage (``p + stash_beyond_p`` for ``p`` stages), its bubble (as printed),
    and the condition under which that bubble is zero."""

    name: str
    chunks_per_gpu: int
    parameter_copies: int
    sends_vs_1f1b: int
    stash_beyond_p: int
    bubble: str
    cite: str
    zero_bubble_when: str = ""


PIPELINE_SCHEDULES = {
    s.name: s
    for s in (
        # Qi et al. 2024, sec. 6 (arXiv 2401.10241): ZB-V splits the model into
        # 2p chunks, two per GPU placed in a V (GPU i holds chunks i and 2p-1-i),
        # so the first and last chunk share a GPU; zero bubble at 1F1B's peak
        # activation memory when T_F = T_B = T_W, with interleaving's two sends.
        PipelineSchedule("ZB-V", 2, 1, 2, 0, "0", "qi2023zerobubble", "T_F = T_B = T_W"),
        # DeepSeek-V3 report, sec. 3.2.1, Table 2: micro-batches fed from both
        # ends; each GPU holds stages i and p-1-i (two copies of the
        # parameters), activations of p+1 micro-batches, bubble
        # (p/2 - 1)(T_F&B + T_B - 3 T_W) with T_F&B two overlapped chunks.
        PipelineSchedule("DualPipe", 2, 2, 1, 1, "(p/2 - 1)(T_F&B + T_B - 3 T_W)",
                         "liu2024deepseekv3"),
    )
}

#: Attention that shrinks K/V beyond grouped-query attention: DeepSeek-V3's
#: multi-head latent attention caches a compressed latent of width 512 plus a
#: decoupled RoPE key of 64 per token and layer, for 128 heads of 128
#: (report sec. 2.1.1 and 4.2).
DEEPSEEK_V3_MLA = {"kv_latent": 512, "rope_key": 64, "heads": 128, "head_dim": 128,
                   "cite": "liu2024deepseekv3"}


def pipeline_stash(schedule: PipelineSchedule, stages: int) -> int:
    """Micro-batches of activations the first stage holds at its peak under
    ``schedule`` with ``stages`` pipeline stages (1F1B holds ``stages``)."""
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise ValueError(f"stages must be a positive integer, got {stages!r}")
    return stages + schedule.stash_beyond_p
