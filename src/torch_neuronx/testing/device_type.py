# The neuron device test base, for PyTorch's TORCH_TEST_DEVICES hook (see __init__.py).
#
# PyTorch runs this file with runpy inside torch.testing._internal.common_device_type, whose
# globals (PrivateUse1TestBase, device_type_test_bases) it sees; its note on extending
# DeviceTypeTestBase asks such files not to import that module themselves.


class NeuronTestBase(PrivateUse1TestBase):  # noqa: F821 (a global of common_device_type)
    # Test classes are named ...NEURON from the start (the generic base says "privateuse1" until
    # its first setUpClass).
    device_type = "neuron"

    @classmethod
    def instantiate_test(cls, name, test, *, generic_cls=None):
        # The OpInfo and ModuleInfo databases are complete only once the test file has imported
        # them, after this file ran: declare neuron's entries when the first test is made.
        from torch_neuronx.testing.moduleinfo import declare_neuron_moduleinfo
        from torch_neuronx.testing.opinfo import declare_neuron_opinfo

        declare_neuron_opinfo()
        declare_neuron_moduleinfo()
        super().instantiate_test(name, test, generic_cls=generic_cls)


# This base replaces the generic PrivateUse1 one, which would make every test a second time
# under the same class name.
if PrivateUse1TestBase in device_type_test_bases:  # noqa: F821
    device_type_test_bases.remove(PrivateUse1TestBase)  # noqa: F821

TEST_CLASS = NeuronTestBase
