"""torch-neuronx: the `neuron` device for PyTorch (AWS Trainium2/Trainium3).

Importing this package (which `import torch` does by itself through the `torch.backends` entry
point, unless TORCH_DEVICE_BACKEND_AUTOLOAD=0) registers the `neuron` device and `torch.neuron`.
Without Trainium hardware the device is the software NeuronCore built into the extension.
"""
import torch

from . import _C  # noqa: F401  (registers the device's kernels, allocator and hooks)

if torch._C._get_privateuse1_backend_name() != "neuron":
    torch.utils.rename_privateuse1_backend("neuron")

from . import neuron as _neuron_module  # noqa: E402

if not hasattr(torch, "neuron"):
    torch._register_device_module("neuron", _neuron_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )

from .ops import get_fallback_ops, get_generic_ops, reset_fallback_ops  # noqa: E402

__version__ = "0.1.0"
__all__ = ["get_fallback_ops", "reset_fallback_ops", "get_generic_ops"]


def _autoload():
    """Entry point of the `torch.backends` group: importing the package did the work."""
