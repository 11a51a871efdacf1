"""`nki.isa`: one call, one NeuronCore instruction (NKI 0.6 / Neuron SDK 2.33, destination-passing).

Each call checks the hardware's rules for its operands at the call (the error names the rule, the
instruction and the kernel's line), then records the instruction: its engine, its cost in engine
cycles (the NKI docs' per-instruction estimates), what it reads and writes, and the whole-tile
steps that execute it. Engines compute in fp32 and cast to the destination's dtype.
"""
from __future__ import annotations

import enum
import sys
import types

from . import _profile  # noqa: F401  (nki.language reads the profile through nisa)
from ._errors import NkiValidationError
from ._isa_base import dge_mode, engine, get_nc_version, matmul_perf_mode, nc_version, oob_mode, reduce_cmd
from ._isa_core import (
    activation, activation_reduce, affine_select, bn_aggr, bn_stats, dma_copy, dma_transpose, iota, max8, memset,
    nc_matmul, nc_transpose, reciprocal, scalar_tensor_tensor, tensor_copy, tensor_partition_reduce, tensor_reduce,
    tensor_scalar, tensor_tensor,
)
from ._isa_more import (
    nc_find_index8, range_select, select_reduce, tensor_scalar_cumulative, tensor_scalar_reduce, tensor_tensor_scan,
)
from ._isa_extra import (
    VirtualRegister, activate2, dma_compute, exponential, local_gather, nc_match_replace8, nc_matmul_mx, nc_n_gather,
    nc_stream_shuffle, nonzero_with_count, quantize_mx, register_alloc, register_load, register_move, register_store,
    sequence_bounds, tensor_copy_predicated,
)
from ._isa_rng import dropout, rand2, rand_get_state, rand_set_state, rng, set_rng_seed



class dma_engine(enum.Enum):  # noqa: N801  (NKI's spelling)
    """Which DMA moves a transfer (sendrecv's `dma_engine=`): the shared DMA queues, or GpSimd's own
    for SBUF-to-SBUF swaps between the two cores of LNC 2. Either moves the same bytes here."""
    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


__all__ = ["dma_copy", "dma_transpose", "tensor_copy", "memset", "iota", "affine_select", "tensor_tensor",
           "tensor_scalar", "scalar_tensor_tensor", "tensor_reduce", "tensor_partition_reduce", "activation",
           "activation_reduce",
           "reciprocal", "nc_matmul", "nc_transpose", "bn_stats", "bn_aggr", "max8", "tensor_tensor_scan",
           "tensor_scalar_reduce", "tensor_scalar_cumulative", "nc_find_index8", "range_select",
           "select_reduce", "tensor_copy_predicated", "nc_stream_shuffle", "sequence_bounds",
           "rng", "rand2", "dropout", "set_rng_seed", "rand_set_state", "rand_get_state", "nc_matmul_mx",
           "quantize_mx", "nc_n_gather", "nonzero_with_count", "exponential", "activate2", "nc_match_replace8",
           "dma_compute", "register_alloc", "register_move", "register_load", "register_store", "local_gather",
           "VirtualRegister", "engine", "dma_engine", "reduce_cmd", "tensor_engine", "vector_engine",
           "scalar_engine", "gpsimd_engine", "core_barrier", "sendrecv",
           "nc_version", "get_nc_version", "dge_mode", "oob_mode", "matmul_perf_mode", "NkiValidationError"]


# The engines under their older names, which nki-library still passes as `engine=`.
tensor_engine, vector_engine, scalar_engine, gpsimd_engine = engine.tensor, engine.vector, engine.scalar, engine.gpsimd

# nki.isa.constants: the enums again, where nki-library imports them (`from nki.isa.constants import
# oob_mode`); a module object registered under that name, as isa is a module, not a package.
constants = sys.modules[__name__ + ".constants"] = types.ModuleType(__name__ + ".constants")
for _enum in (engine, reduce_cmd, nc_version, dge_mode, oob_mode, matmul_perf_mode):
    setattr(constants, _enum.__name__, _enum)

from ._isa_cores import core_barrier, sendrecv  # noqa: E402

# A documented instruction not implemented yet imports fine and raises "not supported yet" when used.
from . import _api  # noqa: E402

__getattr__ = _api.module_getattr("nki.isa", "nisa")
