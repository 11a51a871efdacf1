"""PyTorch's own device-generic test machinery instantiates for neuron."""
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

_SOME_OPS = [op for op in op_db if op.name in ("add", "mul", "exp", "sum", "softmax")]


class TestNeuronGeneric(TestCase):
    def test_runs_on_neuron(self, device):
        self.assertTrue(device.startswith("neuron"))
        x = torch.arange(4.0, device=device)
        self.assertEqual((x * 2).cpu(), torch.arange(4.0) * 2)

    @ops(_SOME_OPS, allowed_dtypes=(torch.float32,))
    def test_ops_match_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            actual = op(sample.input, *sample.args, **sample.kwargs)
            cpu = sample.transform(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t)
            expected = op(cpu.input, *cpu.args, **cpu.kwargs)
            self.assertEqual(actual.cpu(), expected)


instantiate_device_type_tests(TestNeuronGeneric, globals(), only_for="neuron")


def test_neuron_classes_were_created():
    assert "TestNeuronGenericNEURON" in globals()
    assert not any(name.endswith("PRIVATEUSE1") for name in globals())
