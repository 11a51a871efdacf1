"""The documented NKI 2.33 surface, name by name, and what a name that is not implemented here yet
resolves to. The lists are the API reference's tables of contents (nki.language: creation, tensor,
math, activation, normalization, reduction, comparison, logical, bitwise, manipulation, indexing,
iterators, memory, others, data types, constants; nki.isa: instructions, config enums, target),
gathered from AWS's docs for SDK 2.29-2.33. A missing documented name imports fine (a module that
merely names it keeps working) and raises "not supported yet" when it is used.
`python -c "from torch_neuronx.nki import _api; print(_api.table())"` prints the coverage table the
README carries."""
from __future__ import annotations

from ._errors import NkiTraceError

LANGUAGE = {
    "creation": "ndarray zeros ones full zeros_like empty_like shared_constant shared_identity_matrix rand "
                "random_seed",
    "tensor class": "NkiTensor",
    "tensor": "load load_transpose2d store copy matmul transpose",
    "math": "abs abs_max abs_min add arctan ceil cos exp floor log maximum minimum multiply negative power "
            "reciprocal rsqrt sign sin sqrt square subtract tan tanh trunc",
    "activation": "relu sigmoid silu silu_dx gelu gelu_dx gelu_apprx_sigmoid gelu_apprx_sigmoid_dx "
                  "gelu_apprx_tanh mish softplus softmax erf erf_dx",
    "normalization": "dropout rms_norm",
    "reduction": "all max mean min prod sum",
    "comparison": "equal not_equal greater greater_equal less less_equal",
    "logical": "logical_and logical_or logical_xor logical_not",
    "bitwise": "bitwise_and bitwise_or bitwise_xor invert left_shift right_shift",
    "manipulation": "where ds expand_dims broadcast_to",
    "indexing": "arange mgrid",
    "iterators": "static_range affine_range sequential_range dynamic_range",
    "memory": "psum sbuf hbm private_hbm shared_hbm",
    "others": "program_id num_programs program_ndim spmd_dim nc device_print NKIObject dtype",
    "data types": "bool_ int8 int16 int32 uint8 uint16 uint32 float16 float32 bfloat16 tfloat32 float8_e4m3 "
                  "float8_e5m2 float8_e4m3fn float8_e8m0fnu float8_e5m2_x4 float8_e4m3fn_x4 float4_e2m1fn_x4",
    "constants": "tile_size",
}

ISA = {
    "instructions": "nc_matmul nc_matmul_mx nc_transpose activation activate2 activation_reduce tensor_reduce "
                    "tensor_partition_reduce tensor_tensor tensor_tensor_scan scalar_tensor_tensor tensor_scalar "
                    "tensor_scalar_reduce tensor_scalar_cumulative tensor_copy tensor_copy_predicated exponential "
                    "reciprocal quantize_mx iota dropout affine_select range_select select_reduce sequence_bounds "
                    "memset bn_stats bn_aggr local_gather nc_n_gather dma_copy dma_transpose dma_compute max8 "
                    "nc_find_index8 nc_match_replace8 nc_stream_shuffle register_alloc register_load register_move "
                    "register_store core_barrier sendrecv rng rand2 rand_set_state rand_get_state set_rng_seed "
                    "nonzero_with_count",
    "config enums": "engine dma_engine reduce_cmd dge_mode oob_mode matmul_perf_mode",
    "target": "nc_version get_nc_version",
}

MODULES = {"nki.language": LANGUAGE, "nki.isa": ISA}


def documented(module: str) -> dict[str, str]:
    """Each documented name of `module` ("nki.language" / "nki.isa"), with its section."""
    return {name: section for section, names in MODULES[module].items() for name in names.split()}


class NotSupportedYet:
    """What a documented name not implemented here resolves to: importing it works; calling it, or
    reading anything from it, raises at trace time naming it."""

    def __init__(self, qualname: str, reason: str = ""):
        self._qualname, self._reason = qualname, reason

    def __repr__(self):
        return f"<{self._qualname}: not supported yet>"

    def _refuse(self):
        why = f": {self._reason}" if self._reason else ""
        raise NkiTraceError(f"{self._qualname} is documented NKI 2.33 API that torch_neuronx does not support "
                            f"yet{why}")

    def __call__(self, *args, **kwargs):
        self._refuse()

    def __getattr__(self, attr):
        if attr.startswith("__"):  # copy/pickle/inspect probe dunders: plain AttributeError
            raise AttributeError(attr)
        self._refuse()

    def __getitem__(self, key):
        self._refuse()

    def __iter__(self):
        self._refuse()


def module_getattr(module: str, short: str):
    """A module `__getattr__`: a documented missing name gives its NotSupportedYet; any other name is
    the usual AttributeError."""

    def __getattr__(name):
        if name in documented(module):
            return NotSupportedYet(f"{short}.{name}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def coverage() -> list[tuple[str, int, int, list[str]]]:
    """(module, implemented, documented, missing names) per module."""
    import importlib

    rows = []
    for module in MODULES:
        mod = importlib.import_module("torch_neuronx.nki." + module.split(".")[1])
        names = documented(module)
        missing = [n for n in names if isinstance(getattr(mod, n), NotSupportedYet) or
                   getattr(getattr(mod, n), "not_supported_yet", False)]
        rows.append((module, len(names) - len(missing), len(names), missing))
    return rows


def table() -> str:
    lines = ["| module | documented | implemented | missing (raise \"not supported yet\") |",
             "|---|---|---|---|"]
    for module, have, total, missing in coverage():
        lines.append(f"| `{module}` | {total} | {have} ({100 * have // total}%) | {', '.join(missing) or '-'} |")
    return "\n".join(lines)
