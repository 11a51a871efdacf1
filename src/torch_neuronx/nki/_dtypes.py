"""NKI's data types as tile dtypes. A type torch has is that torch dtype, so a tensor's `.dtype`
compares with `nl.float32` and friends. A documented type torch lacks (Trn3's packed MX formats) is
an `UnsupportedDtype`: naming it in a module always works (nki-library's helpers list every type
at import), and only making a tile of it raises "not supported yet"."""
from __future__ import annotations

import numpy as np
import torch

from ._errors import NkiTraceError

dtype = torch.dtype  # nki.dtype / nl.dtype: what `isinstance(t, nl.dtype)` and annotations mean


class UnsupportedDtype:
    """A documented NKI type with no torch dtype here (yet)."""

    def __init__(self, name: str, why: str):
        self.name, self.why = name, why

    def __repr__(self):
        return f"nl.{self.name}"

    def __str__(self):
        return self.name

    @property
    def itemsize(self):
        self.refuse()

    def refuse(self):
        raise NkiTraceError(f"nl.{self.name} is not supported yet: {self.why}")


float32, bfloat16, float16 = torch.float32, torch.bfloat16, torch.float16
tfloat32 = torch.float32  # fp32 storage; the PE array's 10-bit-mantissa rounding is not modelled
int32, int16, int8 = torch.int32, torch.int16, torch.int8
uint8, uint16, uint32 = torch.uint8, torch.uint16, torch.uint32
bool_ = torch.bool

float8_e4m3fn, float8_e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
# Trainium's float8_e4m3 is the IEEE-style e4m3 (largest finite 240, exponent 15 holds inf/NaN);
# torch has no such dtype. Below 240 in magnitude its encodings and rounding are e4m3fn's (same
# bias, same subnormals), so e4m3fn stores it; a value past 240 keeps e4m3fn's extended range
# (up to 448) where the hardware would overflow. It is the same torch dtype as nl.float8_e4m3fn.
float8_e4m3 = torch.float8_e4m3fn
float8_e8m0fnu = getattr(torch, "float8_e8m0fnu", None) or UnsupportedDtype(
    "float8_e8m0fnu", "this torch has no float8_e8m0fnu")
_MX = "4 values packed in one element for nisa.nc_matmul_mx (Trn3's MX formats); torch has no packed-by-4 dtype"
float8_e5m2_x4 = UnsupportedDtype("float8_e5m2_x4", _MX)
float8_e4m3fn_x4 = UnsupportedDtype("float8_e4m3fn_x4", _MX)
float4_e2m1fn_x4 = UnsupportedDtype("float4_e2m1fn_x4", _MX)

# The spellings a kernel may pass as dtype= besides the nl objects: NKI 0.3+ names types by
# string ('bfloat16'), older kernels by NumPy dtype (np.float32).
_BY_NAME = dict(
    float32=float32, bfloat16=bfloat16, float16=float16, tfloat32=tfloat32, int32=int32, int16=int16, int8=int8,
    uint8=uint8, uint16=uint16, uint32=uint32, bool=bool_, bool_=bool_, float8_e4m3=float8_e4m3,
    float8_e4m3fn=float8_e4m3fn, float8_e5m2=float8_e5m2, float8_e8m0fnu=float8_e8m0fnu,
    float8_e5m2_x4=float8_e5m2_x4, float8_e4m3fn_x4=float8_e4m3fn_x4, float4_e2m1fn_x4=float4_e2m1fn_x4)
_NOT_NKI = (torch.float64, torch.int64, torch.complex64, torch.complex128)


def resolve(d) -> torch.dtype:
    """The tile dtype of a dtype= argument, or a trace-time error naming what is wrong with it."""
    if isinstance(d, UnsupportedDtype):
        d.refuse()
    if isinstance(d, str) and d in _BY_NAME:
        return resolve(_BY_NAME[d])
    if isinstance(d, (np.dtype, type)) and not isinstance(d, torch.dtype):
        try:
            return resolve(torch.from_numpy(np.empty(0, dtype=d)).dtype)
        except TypeError:
            pass
    if not isinstance(d, torch.dtype) or d in _NOT_NKI:
        raise NkiTraceError(f"{d} is not an NKI dtype (NeuronCores compute fp32, bf16, fp16, fp8 and integers up "
                            f"to 32 bits)")
    return d
