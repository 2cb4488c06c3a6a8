"""Accelerators as data: one table (``solutions/data/gpus.toml``) of dense peaks per
precision, memory, bandwidths and the system each GPU ships in, every row dated and cited.

Model FLOPs utilisation (Chowdhery et al. 2022, App. B) divides the FLOP/s a run achieves
by the peak of the arithmetic it used, so the table holds one DENSE peak per precision
(never the 2:4-sparsity figure that datasheets print first) and none where the chip has no
native support: a T4 training in bf16 emulates it, an H100 has no FP4.

What the planner reads (:class:`GPUSpec`):

* ``peak_flops_per_s``: ``fp32`` (vector), ``fp16``, ``bf16``, ``fp8`` and ``fp4``;
  :data:`PRECISIONS` map the planner's ``--precision`` onto them (MXFP8 runs at the FP8
  rate, NVFP4 at the FP4 rate) and :meth:`GPUSpec.supports` says which a chip has;
* ``mamf``: a measured maximum achievable matmul rate where one is published (Bekman's
  sweep of shapes, ``bekman2024mlengineering``), else the measured share of peak of a
  sibling (``mamf_like``): :meth:`GPUSpec.ceiling` is the roof the step-time model's
  matrix products run under;
* ``memory_bytes``: the total CUDA reports (``torch.cuda.get_device_properties().total_memory``),
  where a public report gives it; else nvidia-smi's total; else the size in the name of the
  card's full-GPU MIG profile (nvidia-smi's total rounded up: an upper bound, and the only
  public figure for a Blackwell Ultra, whose "288 GB" are 7g.269gb on a B300); else the
  vendor's figure read as GiB (HBM "GB" are mostly binary: an "80 GB" H100 shows 81,559 MiB
  in nvidia-smi and 79.11 GiB to CUDA). ``memory_basis`` says which.
  :data:`ALLOCATOR_RESERVE_BYTES` is kept back for the CUDA context and the communication
  buffers: :attr:`GPUSpec.usable_memory_bytes`;
* ``host_link_bytes_per_s``: the link to the host's memory each way (PCIe, or NVLink-C2C to
  a Grace CPU), over which activation offloading moves, where the datasheet gives it;
* the scale-up domain (GPUs one NVLink or Infinity Fabric joins, bytes/s per GPU each way)
  and the scale-out NICs of the reference node, whose sum the node's GPUs share
  (:attr:`GPUSpec.network_bytes_per_s`: bytes/s per GPU each way).

The labs' side is unchanged: :data:`ACCELERATORS` maps the exact strings
``torch.cuda.get_device_name`` reports onto the same rows (:func:`lookup`, :func:`peak_flops`),
so that "Quadro T400" is not taken for a T4, nor an "H100 NVL" for an H100 SXM, and a GPU not
listed gets no peak ("unknown GPU: MFU not computed").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib  # Python 3.11 and newer
except ModuleNotFoundError:  # Python 3.10, which the labs' GPU check runs on: tomllib began as tomli,
    try:                     # which pip ships inside itself
        import tomli as tomllib
    except ModuleNotFoundError:
        try:
            from pip._vendor import tomli as tomllib
        except ImportError:
            raise ImportError("reading solutions/data/gpus.toml needs Python 3.11 or newer, or the tomli "
                              "package on Python 3.10 (pip install tomli)") from None

__all__ = ["DTYPES", "PRECISIONS", "PRECISION_PEAK", "ALLOCATOR_RESERVE_BYTES", "TABLE_PATH", "GPUSpec",
           "load_table", "GPU_TABLE", "PLANNABLE", "find_gpu", "Accelerator", "ACCELERATORS", "lookup", "Peak",
           "peak_flops", "choose_dtype", "UNKNOWN_GPU"]

#: Compute dtypes the labs train in (parameters and optimizer state stay fp32).
DTYPES = ("fp32", "fp16", "bf16")
#: The planner's training precisions, and the peak each one runs at.
PRECISION_PEAK = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4", "fp32": "fp32"}
PRECISIONS = ("bf16", "fp16", "fp8", "mxfp8", "nvfp4")
#: Memory the planner keeps back from what CUDA reports: the CUDA context (about 0.5 GiB on
#: a Hopper GPU with lazy module loading) and NCCL's buffers. The caching allocator's
#: fragmentation is not modelled: a plan that fits by less than a few percent may not.
ALLOCATOR_RESERVE_BYTES = 1 * 2**30
TABLE_PATH = Path(__file__).with_name("data") / "gpus.toml"
GIB, MIB = 2**30, 2**20

UNKNOWN_GPU = "unknown GPU: MFU not computed"


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator and its reference system (see the module docstring); bytes and
    FLOP/s throughout, bandwidths per GPU in each direction."""

    name: str
    peak_flops_per_s: dict = field(hash=False)
    memory_bytes: float
    hbm_bytes_per_s: float
    scale_up_gpus: int
    scale_up_bytes_per_s: float
    gpus_per_node: int
    nics_per_node: int
    nic_bytes_per_s: float
    formats: tuple = ("bf16",)
    mamf: dict = field(default_factory=dict, hash=False)
    mamf_like: str = ""
    memory_source: str = ""
    memory_vendor: str = ""
    scale_up_name: str = ""
    vendor: str = ""
    architecture: str = ""
    released: str = ""
    as_of: str = ""
    cite: tuple = ()
    aliases: tuple = ()
    device_names: tuple = ()
    note: str = ""
    chapter_note: str = ""
    lab_only: bool = False
    exp_per_s: float = 0.0
    host_link_bytes_per_s: float = 0.0
    host_link_name: str = ""
    #: where ``memory_bytes`` comes from: ``'cuda'`` (what CUDA reports), ``'nvidia-smi'``,
    #: ``'mig'`` (NVIDIA's full-GPU MIG profile size, nvidia-smi's total rounded up: an upper
    #: bound) or ``'vendor'`` (the datasheet's figure read as GiB).
    memory_basis: str = ""

    @property
    def exponentials_per_s(self) -> float:
        """Softmax's exponentials per second (the special-function units), or a quarter of
        the FP32 vector rate where the table has none."""
        return self.exp_per_s or self.peak_flops_per_s.get("fp32", 0.0) / 4

    @property
    def network_bytes_per_s(self) -> float:
        """Scale-out bytes/s per GPU each way: the node's NICs shared by its GPUs."""
        return self.nics_per_node * self.nic_bytes_per_s / self.gpus_per_node

    def host_link(self) -> float:
        """Bytes/s each way to the host's memory (a ``ValueError`` in one line where the table
        has no figure: activation offloading cannot be planned on that GPU)."""
        if not self.host_link_bytes_per_s:
            raise ValueError(f"no host-link figure for the {self.name}: activation offloading cannot be planned on it")
        return self.host_link_bytes_per_s

    @property
    def usable_memory_bytes(self) -> float:
        """What CUDA reports, less :data:`ALLOCATOR_RESERVE_BYTES`."""
        return self.memory_bytes - ALLOCATOR_RESERVE_BYTES

    def supports(self, precision: str) -> bool:
        return precision == "fp32" or precision in self.formats

    def peak(self, precision: str = "bf16") -> float:
        """Dense peak FLOP/s of the matrix products in ``precision`` (a ``ValueError`` in one
        line, naming what the chip has, where it has not)."""
        if precision not in PRECISION_PEAK:
            raise ValueError(f"precision must be one of {list(PRECISIONS)}, got {precision!r}")
        if not self.supports(precision):
            raise ValueError(f"precision {precision} is not available on the {self.name} "
                             f"(it has {', '.join(self.formats)})")
        return self.peak_flops_per_s[PRECISION_PEAK[precision]]

    def ceiling(self, precision: str = "bf16") -> float:
        """FLOP/s a well-shaped matrix product reaches in ``precision``: the measured maximum
        where published, else this chip's peak times the measured share of peak of the
        nearest precision measured on it, or of its sibling ``mamf_like``."""
        return self._ceiling(precision)[0]

    def ceiling_basis(self, precision: str = "bf16") -> str:
        """Where :meth:`ceiling` comes from, in words: ``'measured'``, or whose measured share
        of peak it borrows (``"the A100 80GB's measured share of peak"``), or ``'the peak'``."""
        return self._ceiling(precision)[1]

    def _ceiling(self, precision: str) -> tuple:
        peak = self.peak(precision)
        key = PRECISION_PEAK[precision]
        if key in self.mamf:
            return self.mamf[key], "measured"
        for source in (self, GPU_TABLE.get(self.mamf_like)):
            if source is None or not source.mamf:
                continue
            for k in (key, "fp8" if key == "fp4" else key, "bf16", "fp16"):
                if k in source.mamf:
                    whose = "its" if source is self else f"the {source.name}'s"
                    at = "" if k == key else f" in {k.upper()}"
                    return peak * source.mamf[k] / source.peak_flops_per_s[k], f"{whose} measured share of peak{at}"
        return peak, "the peak"

    @property
    def sixteen_bit(self) -> str:
        """The chip's 16-bit training format: ``'bf16'``, or ``'fp16'`` on chips without it (T4)."""
        return "bf16" if self.peak_flops_per_s.get("bf16") else "fp16"

    @property
    def bf16_peak(self) -> float:
        """The 16-bit tensor peak (fp16 on chips without bf16): what MFU is quoted against."""
        return self.peak_flops_per_s[self.sixteen_bit]


def _memory_bytes(row) -> tuple[float, str]:
    """The card's capacity from the best figure the row has: CUDA's total, nvidia-smi's, the
    full-GPU MIG profile's size, else the vendor's figure read as GiB."""
    if "memory_cuda_gib" in row:
        return row["memory_cuda_gib"] * GIB, "cuda"
    if "memory_smi_mib" in row:
        return row["memory_smi_mib"] * MIB, "nvidia-smi"
    if "memory_mig_gib" in row:
        return float(row["memory_mig_gib"]) * GIB, "mig"
    return float(row["memory_vendor"].split()[0]) * GIB, "vendor"


def load_table(path: Path = TABLE_PATH) -> dict:
    """``{name: GPUSpec}`` from the TOML table, checked: every row dated and cited, peaks
    positive and listed for every format it claims."""
    rows = tomllib.loads(Path(path).read_text(encoding="utf-8"))["gpu"]
    table = {}
    for row in rows:
        name = row["name"]
        for key in ("released", "as_of", "cite", "tflops", "memory_vendor", "memory_source", "hbm_tb_s",
                    "scale_up", "scale_out", "formats"):
            if not row.get(key):
                raise ValueError(f"gpu table: row {name!r} lacks {key!r}")
        peaks = {k: float(v) * 1e12 for k, v in row["tflops"].items()}
        for fmt in row["formats"]:
            if peaks.get(PRECISION_PEAK[fmt], 0) <= 0:
                raise ValueError(f"gpu table: row {name!r} claims {fmt} without a {PRECISION_PEAK[fmt]} peak")
        mem, basis = _memory_bytes(row)
        if not mem > 0:
            raise ValueError(f"gpu table: row {name!r} has no positive memory ({basis})")
        up, out = row["scale_up"], row["scale_out"]
        table[name] = GPUSpec(
            name, peaks, mem, row["hbm_tb_s"] * 1e12, int(up["gpus"]), up["gb_s"] * 1e9,
            int(out["gpus_per_node"]), int(out["nics"]), out["nic_gbps"] * 1e9 / 8, tuple(row["formats"]),
            {k: float(v) * 1e12 for k, v in row.get("mamf_tflops", {}).items()}, row.get("mamf_like", ""),
            row["memory_source"], row["memory_vendor"], up.get("name", ""), row.get("vendor", ""),
            row.get("architecture", ""), row["released"], row["as_of"], tuple(row["cite"]),
            tuple(row.get("aliases", ())), tuple(row.get("device_names", ())), row.get("note", ""),
            row.get("chapter_note", ""), bool(row.get("lab_only", False)), float(row.get("exp_per_s", 0.0)),
            row.get("host_link", {}).get("gb_s", 0.0) * 1e9, row.get("host_link", {}).get("name", ""), basis)
    return table


GPU_TABLE = load_table()
#: The GPUs the planner plans clusters of (the labs' older or single-server GPUs left out).
PLANNABLE = tuple(n for n, g in GPU_TABLE.items() if not g.lab_only)


def _key(s: str) -> str:
    return "".join(s.lower().split())


_BY_KEY = {}
for _g in GPU_TABLE.values():
    for _n in (_g.name, *_g.aliases):
        _BY_KEY[_key(_n)] = _g


def find_gpu(name) -> GPUSpec:
    """The row called ``name`` or one of its aliases (case and spaces ignored); a one-line
    ``ValueError`` that lists the known names otherwise."""
    if isinstance(name, GPUSpec):
        return name
    if isinstance(name, str) and _key(name) in _BY_KEY:
        return _BY_KEY[_key(name)]
    raise ValueError(f"gpu must be one of {', '.join(PLANNABLE)} (or an alias such as H100, A100, GB200 NVL72), "
                     f"got {name!r}")


# --------------------------------------------------------------------------
# The labs: torch's device names onto the same rows
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Accelerator:
    """Peak dense FLOP/s per dtype (``None``: no native support) and where they come from."""

    name: str
    device_names: tuple
    peak_flops_per_s: dict = field(hash=False)
    cite: str
    note: str = ""


ACCELERATORS = {
    g.name: Accelerator(g.name, g.device_names, {d: g.peak_flops_per_s.get(d) for d in DTYPES}, g.cite[0], g.note)
    for g in GPU_TABLE.values() if g.device_names
}

_BY_DEVICE_NAME = {n: a for a in ACCELERATORS.values() for n in a.device_names}


def lookup(device_name: str) -> Accelerator | None:
    """The accelerator whose reported name is exactly ``device_name`` (spaces trimmed), else ``None``."""
    if not isinstance(device_name, str):
        raise ValueError(f"device_name must be a string, got {device_name!r}")
    return _BY_DEVICE_NAME.get(device_name.strip())


@dataclass(frozen=True)
class Peak:
    flops_per_s: float
    gpu: str
    dtype: str
    cite: str

    @property
    def source(self) -> str:
        return f"solutions.hardware.ACCELERATORS[{self.gpu!r}], {self.dtype} dense ({self.cite})"


def peak_flops(device_name: str, dtype: str) -> Peak | None:
    """Peak dense FLOP/s of ``device_name`` computing in ``dtype`` ('fp32', 'fp16' or 'bf16'),
    or ``None`` when the GPU is not in the table or has no native ``dtype`` arithmetic."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    acc = lookup(device_name)
    if acc is None or acc.peak_flops_per_s[dtype] is None:
        return None
    return Peak(acc.peak_flops_per_s[dtype], acc.name, dtype, acc.cite)


def choose_dtype(requested: str, device_type: str, capability: tuple | None = None) -> tuple[str, str]:
    """``(dtype, reason)``: the compute precision for ``--dtype requested`` on a device of
    type ``device_type`` ('cpu' or 'cuda') with CUDA compute ``capability`` (major, minor).

    ``auto`` picks bf16 where the GPU has bf16 tensor cores (compute capability 8.0 and up:
    Ampere, Ada, Hopper, Blackwell; ROCm's MI300X reports 9.4), fp16 with a gradient scaler
    on GPUs with only fp16 tensor cores (7.x: V100, T4), fp32 on CPU and on older GPUs."""
    if requested not in ("auto", *DTYPES):
        raise ValueError(f"dtype must be one of ('auto', 'fp32', 'fp16', 'bf16'), got {requested!r}")
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")
    if device_type == "cuda":
        if capability is None or len(capability) != 2:
            raise ValueError(f"capability must be (major, minor) for a CUDA device, got {capability!r}")
        capability = tuple(int(c) for c in capability)
    if requested != "auto":
        if requested == "bf16" and device_type == "cuda" and capability < (8, 0):
            return "bf16", "requested; this GPU has no bf16 tensor cores, so bf16 is emulated and slow"
        if requested == "fp16" and device_type == "cuda":
            return "fp16", "requested; with a gradient scaler"
        return requested, "requested"
    if device_type == "cpu":
        return "fp32", "CPU"
    if capability >= (8, 0):
        return "bf16", f"GPU with compute capability {capability[0]}.{capability[1]} (bf16 tensor cores)"
    if capability >= (7, 0):
        return "fp16", (f"GPU with compute capability {capability[0]}.{capability[1]} (fp16 tensor cores, "
                        "no bf16): fp16 with a gradient scaler")
    return "fp32", f"GPU with compute capability {capability[0]}.{capability[1]} (no tensor cores)"
