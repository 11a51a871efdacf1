"""Every constant the cost model (cost_model.py) and the report's layouts (report.py) use beyond the
rooflines, one table per profile, each beside its unit and its source, and the collectives model
built from them.

A constant is one of: `doc` (a figure AWS publishes), `nki` (the NKI profile's own, so an NKI kernel
and an aten op are priced by one model: nki/_profile.py), `fitted` (chosen so the training set of
AWS's published rows of that hardware fit, never per row: benchmarks/cost_model_vs_aws.py says how
many constants against how many rows, and reports a held-out third separately), `assumed` (no
figure found and no published row to fit it to: a placeholder, said so).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .nki import _profile

SDK = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/"
TRN1_PAGE = SDK + "about-neuron/arch/neuron-hardware/trainium.html"
TRN1_INSTANCE = SDK + "about-neuron/arch/neuron-hardware/trn1-arch.html"
TRN2_PAGE = SDK + "about-neuron/arch/neuron-hardware/trainium2.html"
TRN3_PAGE = SDK + "about-neuron/arch/neuron-hardware/trainium3.html"
TRN2_INSTANCE = "https://aws.amazon.com/ec2/instance-types/trn2/"
COLLECTIVES_PAGE = SDK + "neuron-runtime/about/collectives.html"


@dataclass(frozen=True)
class Constant:
    value: float
    unit: str
    kind: str  # "doc", "nki" or "fitted"
    source: str


def _nki_dma_fixed_us(profile: str) -> float:
    return _profile.PROFILES[profile].dma_fixed_ns * 1e-3


# Logical cores (LNC=2) per chip and chips per instance: a trn2.48xlarge is 16 chips of 8 physical
# cores in a 4x4 NeuronLink torus (64 logical cores at LNC=2); Trn3 keeps 8 physical cores per chip.
# Trn1 (validation only: AWS's published Trn1 figures test the model; it is never a device) has 2
# NeuronCore-v2 per chip and no logical cores, 16 chips in a trn1.32xlarge.
LOGICAL_CORES_PER_CHIP = 4
CHIPS_PER_INSTANCE = 16
PHYSICAL_CORES_PER_CHIP = {"trn2": 8, "trn3": 8, "trn1": 2}
LNC = {"trn2": 2, "trn3": 2, "trn1": 1}  # the logical core size each profile is priced at


def instance_cores(profile: str) -> int:
    """Logical cores of one instance (64 on a trn2.48xlarge at LNC=2, 32 on a trn1.32xlarge)."""
    return PHYSICAL_CORES_PER_CHIP[profile] // LNC[profile] * CHIPS_PER_INSTANCE

CONSTANTS = {
    "trn2": {
        "kernel_launch_us": Constant(2.5, "µs per kernel", "fitted",
                                     "a kernel's instruction-stream start beside its DMA descriptor (a run of "
                                     "pointwise ops is one kernel)"),
        "dma_fixed_us": Constant(_nki_dma_fixed_us("trn2"), "µs per op", "nki",
                                 "a DMA descriptor's start-up (nki/_profile.py dma_fixed_ns, NKI DMA guide)"),
        "step_overhead_us": Constant(250.0, "µs per forward step", "fitted",
                                     "the runtime's and the server's fixed cost per model execution (NEFF "
                                     "launch, input copies, sampling, vLLM's scheduling)"),
        "request_overhead_us": Constant(32500.0, "µs per served request", "fitted",
                                        "a served request's admission before its first step (HTTP, "
                                        "tokenization, scheduling): in a published TTFT, not in TPOT"),
        "chip_fabric_bytes_per_s": Constant(2.9e12, "bytes/s per chip", "doc",
                                            "collectives between the logical cores of one chip move through its "
                                            "HBM: " + TRN2_PAGE),
        "neuronlink_bytes_per_s": Constant(1.28e12, "bytes/s per chip", "doc",
                                           "NeuronLink-v3 chip-to-chip bandwidth, all links both ways: "
                                           + TRN2_PAGE),
        "neuronlink_ring_bytes_per_s": Constant(90e9, "bytes/s per rank", "fitted",
                                                "the bus bandwidth a collective's ring achieves over the torus: "
                                                "at most one link one way (1.28 TB/s over 4 links x 2 ways = "
                                                "160 GB/s); fitted with the other three to the 12 training rows"),
        "efa_bytes_per_s": Constant(3.2e12 / 8, "bytes/s per instance", "doc",
                                    "3.2 Tbps EFAv3 per trn2.48xlarge: " + TRN2_INSTANCE),
        "chip_hop_us": Constant(0.5, "µs per algorithm step", "assumed",
                                "a step of a collective between cores of one chip (a semaphore wait; the "
                                "DMA descriptor is the op's fixed cost); no published row exercises it"),
        "neuronlink_hop_us": Constant(1.0, "µs per algorithm step", "assumed",
                                      "a step of a collective over the 4x4 torus (a chip-to-chip DMA's "
                                      "latency beside its descriptor); the decode rows cannot tell it from "
                                      "the per-op cost, which a collective pays too"),
        "efa_hop_us": Constant(20.0, "µs per algorithm step", "assumed",
                               "a step across instances over EFA (" + COLLECTIVES_PAGE + "); no published "
                               "row exercises it"),
    },
}
# Trn3: its own HBM and NeuronLink-v4 figures; the latency constants as Trn2's (AWS publishes no
# Trn3 model figures to fit them to).
CONSTANTS["trn3"] = {
    name: Constant(c.value, c.unit, c.kind, "as trn2 (no Trn3 figure published): " + c.source)
    for name, c in CONSTANTS["trn2"].items()}
CONSTANTS["trn3"].update({
    "dma_fixed_us": Constant(_nki_dma_fixed_us("trn3"), "µs per op", "nki", "nki/_profile.py dma_fixed_ns (trn3)"),
    "chip_fabric_bytes_per_s": Constant(4.9e12, "bytes/s per chip", "doc", "Trn3 HBM: " + TRN3_PAGE),
    "neuronlink_bytes_per_s": Constant(2.56e12, "bytes/s per chip", "doc", "NeuronLink-v4: " + TRN3_PAGE),
    "neuronlink_ring_bytes_per_s": Constant(CONSTANTS["trn2"]["neuronlink_ring_bytes_per_s"].value * 2,
                                            "bytes/s per rank", "fitted",
                                            "trn2's fitted ring bandwidth scaled by NeuronLink-v4/v3 "
                                            "(2.56 / 1.28 TB/s per chip)"),
})


# Trn1, to validate the model against AWS's Trn1 figures (the only ones published across models,
# batch sizes and sequence lengths); its latency constants are fitted to those rows alone.
CONSTANTS["trn1"] = {
    "kernel_launch_us": Constant(0.0, "µs per kernel", "fitted",
                                 "fitted to the Trn1 rows: nothing per kernel beyond the step's overhead and the "
                                 "DMA descriptors (transformers-neuronx runs each step as one compiled program)"),
    "dma_fixed_us": Constant(_nki_dma_fixed_us("trn2"), "µs per op", "assumed",
                             "trn2's NKI DMA descriptor start-up (no NeuronCore-v2 figure published)"),
    "step_overhead_us": Constant(500.0, "µs per forward step", "fitted",
                                 "the runtime's fixed cost per model execution (transformers-neuronx's loop)"),
    "request_overhead_us": Constant(0.0, "µs per served request", "assumed",
                                    "the Trn1 rows time transformers-neuronx's own loop: no request is served"),
    "chip_fabric_bytes_per_s": Constant(820e9, "bytes/s per chip", "doc",
                                        "the two cores of a chip share its HBM, 820 GB/s: " + TRN1_PAGE),
    "neuronlink_bytes_per_s": Constant(384 * 2 ** 30, "bytes/s per chip", "doc",
                                       "NeuronLink-v2, 384 GiB/s per device on trn1.32xlarge: " + TRN1_INSTANCE),
    "neuronlink_ring_bytes_per_s": Constant(25e9, "bytes/s per rank", "fitted",
                                            "the bus bandwidth a ring achieves over the 2D torus, fitted to the "
                                            "Trn1 rows"),
    "efa_bytes_per_s": Constant(800e9 / 8, "bytes/s per instance", "doc", "800 Gbps EFA per trn1.32xlarge: "
                                + TRN1_INSTANCE),
    "chip_hop_us": Constant(0.5, "µs per algorithm step", "assumed", "as trn2's (no Trn1 figure published)"),
    "neuronlink_hop_us": Constant(8.0, "µs per algorithm step", "fitted",
                                  "a step of a collective over the torus, fitted to the Trn1 decodes (two "
                                  "all-reduces per layer over 32 cores)"),
    "efa_hop_us": Constant(20.0, "µs per algorithm step", "assumed", "as trn2's (no Trn1 row crosses EFA)"),
}


def value(profile: str, name: str) -> float:
    return CONSTANTS[profile][name].value


def topology(ranks: int, lnc: int = 2, profile: str = "trn2", stride: int = 1) -> str:
    """Where a group of `ranks` logical cores at LNC=`lnc` talks: within one chip, across the
    instance's NeuronLink torus, or across instances over EFA. Ranks fill a chip, then an instance
    (AWS's recommended placement); `stride` cores apart (a data-parallel group across tensor-parallel
    groups of `stride` cores), the group spans ranks * stride cores."""
    per_chip = PHYSICAL_CORES_PER_CHIP[profile] // lnc
    span = ranks * stride
    if span <= per_chip:
        return "chip"
    if span <= per_chip * CHIPS_PER_INSTANCE:
        return "neuronlink"
    return "efa"


_KINDS = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send"}


def collective_seconds(kind: str, nbytes: int, ranks: int, profile: str = "trn2", lnc: int = 2,
                       stride: int = 1) -> tuple:
    """(seconds, bound) of one collective of `nbytes` (the full buffer: all-reduce's input,
    all-gather's output, reduce-scatter's input, all-to-all's input; a send's message, between
    `ranks`=2) among `ranks` logical cores, `stride` cores apart (see topology).

    Latency: a hierarchical algorithm's ceil(log2(ranks)) steps (twice for all-reduce: a
    reduce-scatter then an all-gather), each level's steps at its own hop latency: within a chip,
    then across the torus, then across instances.
    Bandwidth: the bus bytes each rank moves ((ranks-1)/ranks of the buffer, twice for all-reduce)
    at its share of the slowest link it crosses."""
    if kind not in _KINDS:
        raise ValueError(f"collective_seconds: unknown collective {kind!r}; known: {', '.join(sorted(_KINDS))}")
    if nbytes < 0 or ranks < 1:
        raise ValueError(f"collective_seconds: nbytes must be >= 0 and ranks >= 1, got {nbytes} and {ranks}")
    if ranks == 1:
        return 0.0, "none"
    where = topology(ranks, lnc, profile, stride)
    per_chip = PHYSICAL_CORES_PER_CHIP[profile] // lnc
    c = CONSTANTS[profile]
    if where == "chip":
        bw = c["chip_fabric_bytes_per_s"].value / per_chip
    elif where == "neuronlink":  # a ring: every rank streams at its slowest edge's rate
        bw = c["neuronlink_ring_bytes_per_s"].value
    else:
        bw = c["efa_bytes_per_s"].value / (per_chip * CHIPS_PER_INSTANCE)
    steps = hops(kind, ranks, profile, lnc, stride)
    latency = sum(n * c[f"{level}_hop_us"].value * 1e-6 for level, n in steps.items())
    bus = 1.0 if kind == "send" else (ranks - 1) / ranks * (2 if kind == "all_reduce" else 1)
    bandwidth = bus * nbytes / bw
    return latency + bandwidth, ("collective latency" if latency >= bandwidth else "collective bandwidth")


def hops(kind: str, ranks: int, profile: str = "trn2", lnc: int = 2, stride: int = 1) -> dict:
    """The algorithm steps of one collective among `ranks` logical cores `stride` apart, per level
    it crosses ("chip", "neuronlink", "efa"): ceil(log2(n)) at a level of n members, twice for
    all-reduce (a reduce-scatter, then an all-gather)."""
    per_chip = PHYSICAL_CORES_PER_CHIP[profile] // lnc
    on_chip = min(ranks, max(per_chip // stride, 1))  # members sharing a chip
    on_instance = min(ranks, max(per_chip * CHIPS_PER_INSTANCE // stride, 1))  # members sharing an instance
    levels = (("chip", on_chip), ("neuronlink", on_instance // on_chip), ("efa", math.ceil(ranks / on_instance)))
    twice = 2 if kind == "all_reduce" else 1
    return {level: twice * math.ceil(math.log2(n)) for level, n in levels if n > 1}


def table() -> str:
    """The constants as a Markdown table (the README's, and `make bench-cost-model`'s)."""
    rows = ["| profile | constant | value | unit | kind | source |", "|---|---|---|---|---|---|"]
    for profile, consts in CONSTANTS.items():
        for name, k in consts.items():
            rows.append(f"| {profile} | {name} | {k.value:g} | {k.unit} | {k.kind} | {k.source} |")
    return "\n".join(rows)
