"""PyTorch's own device-generic test machinery instantiates for neuron."""
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

from conftest import run_python

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


# PyTorch's device-generic tests on neuron through torch_neuronx.testing (TORCH_TEST_DEVICES),
# which must be set before PyTorch's test machinery is imported: a fresh interpreter.
_DECLARATIONS_TESTS = '''
import re

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_dtype import all_types_and_complex_and
from torch.testing._internal.common_methods_invocations import op_db, python_ref_db
from torch.testing._internal.common_utils import TestCase
from torch_neuronx.testing.opinfo import EXPECTED_FAILURES, EXTRA_DTYPES

ALL_DTYPES = all_types_and_complex_and(torch.bool, torch.half, torch.bfloat16)


class TestNeuronDeclarations(TestCase):
    @ops([op for op in op_db if op.name in EXTRA_DTYPES], dtypes=OpDTypes.none)
    def test_declared_dtypes_are_the_ones_that_run(self, device, op):
        ran = set()
        for dtype in ALL_DTYPES:  # as test_dtypes decides: a dtype runs if one sample does
            for sample in op.sample_inputs(device, dtype):
                try:
                    op(sample.input, *sample.args, **sample.kwargs)
                    torch.neuron.synchronize()
                except (RuntimeError, TypeError, NotImplementedError):
                    continue
                ran.add(dtype)
                break
        self.assertEqual(ran, op.supported_dtypes(device))
        self.assertTrue(op.supported_dtypes("cpu") < ran)

    @ops([op for op in python_ref_db if (op.name, "TestCommon", "test_python_ref_errors") in EXPECTED_FAILURES],
         dtypes=OpDTypes.none)
    def test_expected_ref_error_failures_still_fail(self, device, op):
        # What test_python_ref_errors does; an entry whose failure is gone must leave the table.
        mode = FakeTensorMode()
        mismatched = 0
        for error in op.error_inputs(device):
            sample = error.sample_input.transform(
                lambda t: FakeTensor.from_tensor(t, mode) if isinstance(t, torch.Tensor) else t)
            try:
                op(sample.input, *sample.args, **sample.kwargs)
            except error.error_type as e:
                mismatched += not re.search(error.error_regex, str(e))
        self.assertGreater(mismatched, 0)


instantiate_device_type_tests(TestNeuronDeclarations, globals(), only_for="neuron")
assert "TestNeuronDeclarationsNEURON" in globals()
# made once, by the neuron base alone
from torch.testing._internal import common_device_type
assert common_device_type.PrivateUse1TestBase not in common_device_type.device_type_test_bases
'''


def test_pytorch_device_generic_tests_use_neurons_declarations(tmp_path):
    import torch_neuronx.testing

    path = tmp_path / "test_declarations.py"
    path.write_text(_DECLARATIONS_TESTS)
    r = run_python(f"import sys, pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-rA', {str(path)!r}]))",
                   env={"TORCH_TEST_DEVICES": torch_neuronx.testing.TEST_BASE,
                        "PYTORCH_TESTING_DEVICE_ONLY_FOR": "neuron"}, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    passed = [line for line in r.stdout.splitlines() if line.startswith("PASSED")]
    # one class per test, made once: histc, max_pool1d and _refs.where
    assert len(passed) == 3 and all("TestNeuronDeclarationsNEURON" in line for line in passed), r.stdout[-4000:]
