"""NKI's errors, raised at the call that broke a rule, naming the rule, the instruction and the
kernel's source line."""
from __future__ import annotations

import linecache
import os
import sys

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_KERNELS = os.path.join(_PACKAGE, "kernels") + os.sep


class NkiValidationError(ValueError):
    """A hardware rule broken (nki.isa.NkiValidationError on Trainium)."""


class NkiTraceError(RuntimeError):
    """Python a kernel may not run while it is traced (or a kernel used outside the rules of a call)."""

    def __init__(self, message: str):
        super().__init__(f"nki: {message}\n  at {kernel_line()}")


def kernel_line() -> str:
    """`file:line: source` of the innermost frame outside this package's machinery: the kernel's
    line that is being traced."""
    frame = sys._getframe(1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not name.startswith(_PACKAGE) or name.startswith(_KERNELS):
            text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return f"{frame.f_code.co_filename}:{frame.f_lineno}: {text}"
        frame = frame.f_back
    return "<unknown line>"


def fail(rule: str, message: str, instruction: str = "") -> None:
    where = f"{instruction}: " if instruction else ""
    raise NkiValidationError(f"nki: {where}{rule}: {message}\n  at {kernel_line()}")


def check(ok: bool, rule: str, message: str, instruction: str = "") -> None:
    if not ok:
        fail(rule, message, instruction)
