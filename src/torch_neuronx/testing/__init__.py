"""Running PyTorch's own device-generic tests (test/test_ops.py and the like) on neuron.

    TORCH_TEST_DEVICES=$(python -c "import torch_neuronx.testing as t; print(t.TEST_BASE)") \
    PYTORCH_TESTING_DEVICE_ONLY_FOR=neuron python -m pytest test_ops.py

`TEST_BASE` is the file PyTorch's `TORCH_TEST_DEVICES` hook loads: the neuron test base, which
gives the OpInfo and ModuleInfo databases neuron's own declarations (`opinfo.py`, `moduleinfo.py`)
before any test is made.
"""
import os

TEST_BASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "device_type.py")
