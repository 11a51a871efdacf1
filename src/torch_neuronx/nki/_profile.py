"""One physical NeuronCore of each device profile, as NKI sees it: on-chip memory per partition,
engine clocks and DMA rates (AWS's Trainium2/Trainium3 architecture pages and NKI DMA guide; see
shared/docs/trainium.md). An NKI kernel runs on one physical core."""
from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class CoreProfile:
    name: str
    nc_version: str  # nki.isa.nc_version member
    sbuf_partition_bytes: int
    psum_partition_bytes: int
    tensor_hz: float
    vector_hz: float
    scalar_hz: float
    gpsimd_hz: float
    dma_queues: int
    dma_queue_bytes_per_ns: float
    dma_fixed_ns: float  # a descriptor's start-up, paid per dma_copy on its queue
    moving_fmax: int  # nc_matmul's largest moving free size into a fp32 PSUM tile

    @property
    def tensor_peak_flops(self) -> float:
        """The PE array: 128 × 128 MACs per cycle on bf16/fp16/fp8 operands."""
        return 2 * 128 * 128 * self.tensor_hz

    @property
    def dma_bytes_per_s(self) -> float:
        return self.dma_queues * self.dma_queue_bytes_per_ns * 1e9


PROFILES = {
    "trn2": CoreProfile("trn2", "gen3", 192 * 1024 + 32 * 1024, 16 * 1024, 2.4e9, 0.96e9, 1.2e9, 1.2e9, 16, 23.0,
                        1300.0, 512),
    "trn3": CoreProfile("trn3", "gen4", 256 * 1024, 16 * 1024, 2.4e9, 1.2e9, 1.2e9, 1.2e9, 16, 33.0, 1300.0, 4096),
}

PSUM_BANK_BYTES = 2048

# A logical NeuronCore groups this many physical cores (LNC=1 or LNC=2 on Trn2 and Trn3, AWS's LNC
# guide): what `nl.nc(n)` may name in a launch grid.
LNC_DEGREES = (1, 2)


@functools.lru_cache(maxsize=1)
def _runtime_profile() -> str:
    """The runtime's profile (TORCH_NEURONX_PROFILE), fixed for the process once it started."""
    from .. import _C

    return _C._runtime_config()["profile"]


def current(name: str | None = None) -> CoreProfile:
    """The named profile, or the one the neuron runtime runs."""
    if name is None:
        name = _runtime_profile()
    if name not in PROFILES:
        raise ValueError(f"nki: unknown profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]
