"""torch-neuronx: the `neuron` device for PyTorch (AWS Trainium2/Trainium3).

Importing this package (which `import torch` does by itself through the `torch.backends` entry
point, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0) registers the `neuron` device and `torch.neuron`.
Without Trainium hardware the device is the software NeuronCore built into the extension.
"""


__version__ = "0.1.0"


def _autoload():
    """Entry point of the `torch.backends` group: importing the package does the work. Defined
    before `import torch` because importing this package first makes torch autoload it while
    it is still initialising."""


import torch  # noqa: E402

from . import _C  # noqa: E402  (registers the device's kernels, allocator and hooks)

_C._log_areas()  # a malformed TORCH_NEURONX_LOG is an error at import, not at the first compile


def _sanitizing() -> bool:
    try:
        return _C._config_flag("TORCH_NEURONX_SANITIZE")
    except RuntimeError:
        return False  # a malformed value is reported when the runtime starts


if _sanitizing():
    # A caught host access then also prints the Python stack of the thread that made it: the
    # runtime's fault handler passes the fault on to faulthandler's, installed before it.
    import faulthandler

    faulthandler.enable()

if torch._C._get_privateuse1_backend_name() != "neuron":
    torch.utils.rename_privateuse1_backend("neuron")

from . import neuron as _neuron_module  # noqa: E402

if not hasattr(torch, "neuron"):
    torch._register_device_module("neuron", _neuron_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )

# torch.autocast("neuron") without a dtype runs in bfloat16, Trainium's native low precision
# (PyTorch's built-in default for a PrivateUse1 device is float16). The setting is per thread in
# PyTorch; this sets it for the importing thread, where training loops run.
torch.set_autocast_dtype("neuron", torch.bfloat16)

from . import _patches, _patches_hf  # noqa: E402

_patches.install()
_patches_hf.install()


def _shutdown():
    """At interpreter exit: waits for the devices, then stops and joins the queue workers before
    any static destructor runs (a worker must never outlive what its tasks use)."""
    _C._shutdown()


import atexit  # noqa: E402

atexit.register(_shutdown)

from . import config  # noqa: E402,F401
from . import compile as _compile  # noqa: E402

_compile._register_lazily()
from . import distributed as _distributed  # noqa: E402

_distributed._register()
from . import multiprocessing as _multiprocessing  # noqa: E402

_multiprocessing.register()
from .compile import compile_stats, reset_compile_stats  # noqa: E402

if _C._config_text("TORCH_NEURONX_KERNELS") not in ("", "cpu"):
    from .nki import eager as _nki_eager

    _nki_eager.install()

# Read once every kernel is registered, so an entry the policy cannot change (a typed kernel) is
# refused at import, not at the first op.
_C._check_op_policy()
_C._configure_concatenation()  # a malformed setting is an error at import


def _price_spans(ops):
    """Prices the device spans of a torch.profiler trace (the Trn2/Trn3 estimates each carries)."""
    from .cost_model import price_traced

    return price_traced(ops)


_C._set_span_estimator(_price_spans)
from .ops import (  # noqa: E402
    concatenation_enabled,
    explain,
    op_counts,
    op_report,
    reset_op_counts,
    set_concatenation,
)

__all__ = ["op_counts", "reset_op_counts", "explain", "op_report", "compile_stats", "reset_compile_stats", "nki_op",
           "estimate", "set_concatenation", "concatenation_enabled"]


def __getattr__(name):
    if name == "nki_op":  # torch_neuronx.nki loads when first used
        from .nki import nki_op

        return nki_op
    if name == "estimate":
        from .cost_model import estimate

        return estimate
    raise AttributeError(f"module 'torch_neuronx' has no attribute {name!r}")
