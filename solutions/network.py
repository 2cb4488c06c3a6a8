"""Collectives on a GPU cluster: which link a group lands on, the bandwidth it gets there,
and the time of a ring all-reduce, all-gather, reduce-scatter or an all-to-all.

**Links.** A group that fits inside one scale-up domain (the 8 GPUs of an HGX server, the 72
of an NVL72 rack) talks over NVLink (or Infinity Fabric). A group that spans domains is
limited by the network: each domain has one NIC per GPU (DGX/HGX, NVL72 trays) and NCCL
spreads a collective's channels over all of them (rail-optimised rings, PXN), so a group
with ``k`` members per domain gets ``k`` NICs. Eight DP groups of one GPU per server (TP8
inside) share the server's eight NICs, one each; FSDP over every GPU (eight members per
server) gets all eight: :func:`bus_bandwidth`.

**Efficiency.** NCCL reaches about 370 GB/s of NVLink 4's 450 GB/s line rate each way,
"the protocol overhead (~20%)" (Jeaugey, NCCL maintainer, NVIDIA/nccl-tests#212):
:data:`NVLINK_EFFICIENCY`. The network's share of its line rate is calibrated on the
course's published runs (:mod:`solutions.calibration`).

**Time** (Hockney's ``alpha + n / beta``; Thakur et al. 2005 for the ring): a ring moves
``2 (n-1)/n`` of the buffer per rank for an all-reduce and ``(n-1)/n`` for an all-gather or a
reduce-scatter (nccl-tests' "bus bandwidth"), in ``2 (n-1)`` or ``n-1`` steps. The latency
is NCCL's own tuning model for its ring algorithm (``src/graph/tuning.cc``): a base latency
and, per step, one latency inside the domain and another across it, for the LL protocol
(low latency, a quarter of the bandwidth) and the Simple protocol (full bandwidth); NCCL
picks the faster, and so does :func:`ring_time`.

References: jeaugey2024ncclbw, nvidia2024nccltuning, thakur2005collectives, hockney1994communication.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ._validate import one_of, positive, positive_integer

__all__ = ["NVLINK_EFFICIENCY", "NCCL_LATENCY_S", "Link", "link_for", "bus_bandwidth", "ring_time", "all_to_all_time",
           "COLLECTIVES", "bus_factor"]

#: NCCL's effective NVLink bandwidth over the line rate (370 / 450 GB/s on an H100).
NVLINK_EFFICIENCY = 370 / 450
#: NCCL's ring latencies in seconds (tuning.cc): base, per step inside a domain (NVLink) and
#: per step across (network), for the LL and Simple protocols.
NCCL_LATENCY_S = {"LL": {"base": 3.6e-6, "nvlink": 0.47e-6, "network": 2.7e-6},
                  "Simple": {"base": 8.4e-6, "nvlink": 3.4e-6, "network": 9.6e-6}}
#: LL carries 8 bytes of payload in 16 (flag and data): a quarter of the Simple bandwidth on
#: an all-reduce or across nodes, a third otherwise (tuning.cc).
_LL_SHARE = 0.25
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def bus_factor(op: str, n: int) -> float:
    """Bytes each rank sends per byte of the buffer: ``2(n-1)/n`` for a ring all-reduce,
    ``(n-1)/n`` for an all-gather (of the output) or a reduce-scatter (of the input)."""
    one_of("op", op, COLLECTIVES)
    n = positive_integer("n", n)
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n


@dataclass(frozen=True)
class Link:
    """Where a group of ``n`` ranks talks: ``'nvlink'`` (inside one scale-up domain) or
    ``'network'``, the bus bandwidth it gets (bytes/s per rank, before efficiency) and the
    scale-up domains it spans."""

    kind: str
    bytes_per_s: float
    domains: int
    members_per_domain: int


def link_for(n: int, stride: int, domain: int, nvlink: float, network: float, nic_share: str = "domain") -> Link:
    """The link of a group of ``n`` ranks whose members are ``stride`` ranks apart in a world
    laid out in scale-up domains of ``domain`` GPUs (consecutive ranks share a domain; TP is
    innermost, so a DP group's members are ``tp x cp`` apart). ``network`` is bytes/s per GPU
    (its NIC): a group with ``k`` members in each domain gets ``k`` NICs, and never more than
    NVLink carries. ``nic_share='gpu'``: one NIC's worth whatever ``k`` (a stack that sends each
    GPU's traffic through its own adapter)."""
    n = positive_integer("n", n)
    stride = positive_integer("stride", stride)
    domain = positive_integer("domain", domain)
    span = n * stride
    if span <= domain:
        return Link("nvlink", nvlink, 1, n)
    per_domain = max(1, min(n, domain // stride))
    domains = math.ceil(n / per_domain)
    nics = per_domain if nic_share == "domain" else 1
    return Link("network", min(nvlink, nics * network), domains, per_domain)


def bus_bandwidth(link: Link, network_efficiency: float) -> float:
    """Bytes/s per rank a ring reaches on ``link``: NVLink at :data:`NVLINK_EFFICIENCY`, the
    network at ``network_efficiency`` (calibrated)."""
    eff = NVLINK_EFFICIENCY if link.kind == "nvlink" else positive("network_efficiency", network_efficiency)
    return link.bytes_per_s * eff


def ring_time(op: str, size_bytes: float, n: int, link: Link, network_efficiency: float) -> float:
    """Seconds of one NCCL ring ``op`` on a buffer of ``size_bytes`` (the all-reduced buffer,
    the gathered output, the scattered input) among ``n`` ranks on ``link``: the faster of
    the LL and Simple protocols, ``latency + bus bytes / bus bandwidth``."""
    n = positive_integer("n", n)
    if n == 1 or size_bytes <= 0:
        return 0.0
    steps = (2 if op == "all_reduce" else 1) * (n - 1)
    inter = (2 if op == "all_reduce" else 1) * (link.domains - 1)
    wire = bus_factor(op, n) * size_bytes
    bw = bus_bandwidth(link, network_efficiency)
    best = math.inf
    for proto, share in (("Simple", 1.0), ("LL", _LL_SHARE)):
        lat = NCCL_LATENCY_S[proto]
        latency = lat["base"] + (steps - inter) * lat["nvlink"] + inter * lat["network"]
        best = min(best, latency + wire / (bw * share))
    return best


def all_to_all_time(intra_bytes: float, inter_bytes: float, nvlink: float, network: float,
                    network_efficiency: float) -> float:
    """Seconds of one all-to-all in which a GPU sends ``intra_bytes`` to the ranks of its own
    scale-up domain, over NVLink at :data:`NVLINK_EFFICIENCY`, and ``inter_bytes`` to ranks
    beyond it, over its NIC at ``network_efficiency``, both at once; plus one message latency
    (NCCL's Simple base and a hop, every peer posted together)."""
    for name, value in (("intra_bytes", intra_bytes), ("inter_bytes", inter_bytes)):
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a non-negative finite number of bytes, got {value!r}")
    t_intra = intra_bytes / (positive("nvlink", nvlink) * NVLINK_EFFICIENCY)
    t_inter = inter_bytes / (positive("network", network) * positive("network_efficiency", network_efficiency)) \
        if inter_bytes else 0.0
    lat = NCCL_LATENCY_S["Simple"]
    return max(t_intra, t_inter) + lat["base"] + (lat["network"] if inter_bytes else lat["nvlink"])
