"""Inductor on neuron: `torch.compile(model)` with the default backend on neuron tensors.

The software NeuronCore's memory is host-addressable, so Inductor's C++ code generator writes the
kernels, as for the CPU. What differs is how they run: every generated kernel is launched as a task
on the current neuron stream (`torch_neuronx._C._launch_cpu_kernel`), like a CUDA kernel launch —
asynchronous, ordered with eager ops, never touching device memory from the host thread. Buffers
come from the neuron caching allocator and extern kernels (matmul, convolution, ...) are ordinary
neuron ops.
"""
from __future__ import annotations

import ctypes
from textwrap import dedent

import torch

from .. import _C


class NeuronCppKernel:
    """A generated C++ kernel: calling it queues a launch on the current stream."""

    _INT_TYPES = ("int64_t", "long", "int32_t", "int", "bool", "uint64_t", "uintptr_t")

    def __init__(self, async_compile, name: str, argtypes: list, source: str):
        self.name = name
        kinds = []
        for t in argtypes:
            t = t.replace("const ", "").strip()
            if t.endswith("*"):
                kinds.append("p")
            elif t in self._INT_TYPES:
                kinds.append("i")
            else:
                raise NotImplementedError(f"neuron: kernel {name} takes a '{t}' argument; compiled neuron kernels "
                                          "take data pointers and integers only")
        self.kinds = "".join(kinds)
        self._binding = async_compile.cpp_pybinding(argtypes, source)
        self._addr = None
        _unresolved.append(self)

    def _resolve(self) -> int:
        binding = self._binding
        if hasattr(binding, "result"):
            binding = binding.result()
        library = ctypes.CDLL(binding.__self__.__file__)  # already loaded: the same handle
        self._addr = ctypes.cast(library.kernel, ctypes.c_void_p).value
        return self._addr

    def __call__(self, *args):
        _C._launch_cpu_kernel(self._addr or self._resolve(), self.name, self.kinds, args)


_unresolved: list = []  # kernels whose library is still being built (Inductor's compile workers)


def neuron_cpp_kernel(async_compile, argtypes: list, source: str, name: str = "kernel") -> NeuronCppKernel:
    return NeuronCppKernel(async_compile, name, argtypes, source)


def program_call(call, device: int = -1):
    """`call` (a compiled graph's launcher) with everything it launches on the stream made one task:
    the program takes one queue position, as a NEFF is one launch on Trainium, and the worker starts
    each kernel as the wrapper launches it. A wait inside it (a sync op, an event) first closes the
    program, so it never holds back work a waiter waits for (see Queue::begin_program).

    The wrapper calls this as it loads, within the compile: its kernels' libraries are waited for
    here, so a compile ends with every file of its program written (the cache entry is whole)."""
    while _unresolved:
        _unresolved.pop()._resolve()
    begin, end = _C._program_begin, _C._program_end

    def run_program(args):
        begin(device)
        try:
            return call(args)
        finally:
            end(device)

    run_program.__wrapped__ = call
    return run_program


class _KernelEngineProperties:
    """What Inductor's heuristics read of a device: the software NeuronCore's kernels run on the
    host's cores."""

    def __init__(self):
        import os

        self.multi_processor_count = os.cpu_count() or 1


def _register() -> None:
    from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device
    from torch._inductor.codegen import cpp
    from torch._inductor.codegen.common import (
        DeviceOpOverrides,
        register_backend_for_device,
        register_device_op_overrides,
    )
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    from .flex_attention import NeuronFlexAttentionPass

    class NeuronInterface(DeviceInterface):
        """torch.neuron as Dynamo and Inductor see a device runtime."""

        device = torch.neuron.device
        Event = torch.Event
        Stream = torch.neuron.Stream

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                torch.neuron.set_device(device)

            @staticmethod
            def current_device() -> int:
                return torch.neuron.current_device()

            @staticmethod
            def get_device_properties(device=None):
                return _KernelEngineProperties()

        current_device = staticmethod(torch.neuron.current_device)
        set_device = staticmethod(torch.neuron.set_device)
        device_count = staticmethod(torch.neuron.device_count)
        is_available = staticmethod(torch.neuron.is_available)
        stream = staticmethod(torch.neuron.stream)
        current_stream = staticmethod(torch.neuron.current_stream)
        set_stream = staticmethod(torch.neuron.set_stream)
        synchronize = staticmethod(torch.neuron.synchronize)

        @classmethod
        def get_device_properties(cls, device=None):
            return cls.Worker.get_device_properties(device)

        @staticmethod
        def maybe_exchange_device(device: int) -> int:
            return NeuronInterface.exchange_device(device)

        @staticmethod
        def exchange_device(device: int) -> int:
            previous = torch.neuron.current_device()
            if device >= 0:
                torch.neuron.set_device(device)
            return previous

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            torch.neuron.set_stream(torch.neuron.Stream(stream_id=stream_id, device_index=device_index,
                                                        device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return torch.neuron.current_stream(device_idx).stream_id

        @staticmethod
        def get_compute_capability(device=None):
            return torch.neuron.get_device_capability(device)

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

        @staticmethod
        def memory_allocated(device=None) -> int:
            return torch.neuron.memory_allocated(device)

        @staticmethod
        def is_triton_capable(device=None) -> bool:
            return False

    class NeuronDeviceOpOverrides(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            return dedent(f"""
                def {name}(idx):
                    return torch.neuron.current_stream(idx).stream_id
                """)

        def set_device(self, device_idx: int) -> str:
            return f"torch.neuron.set_device({device_idx})"

        def synchronize(self) -> str:
            return "torch.neuron.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"torch.neuron.device({device_idx})"

        def cpp_kernel_type(self) -> str:
            return "void*"

    class NeuronWrapperCodegen(PythonWrapperCodegen):
        """Python wrapper whose C++ kernels are neuron launches."""

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures)
            return NeuronWrapperCodegen()

        def write_header(self) -> None:
            super().write_header()
            self.imports.writeline("from torch_neuronx.compile.inductor import neuron_cpp_kernel, program_call")

        def generate_end(self, result) -> None:
            from torch._inductor.virtualized import V

            super().generate_end(result)
            if "neuron" in V.graph.device_types:
                idxs = [i for i in V.graph.device_idxs if i is not None]
                device = idxs[0] if len(idxs) == 1 else -1
                result.writeline(f"{self.launcher_fn_name} = program_call({self.launcher_fn_name}, {device})")

        def define_kernel(self, kernel_name, kernel_body, metadata=None, gpu=True, cpp_definition=None):
            from torch._inductor.virtualized import V

            # A kernel over CPU tensors (an optimizer's step counters, CPU scalars) runs on the host
            # when the wrapper calls it, as CUDA's Inductor runs them: only neuron kernels launch.
            # The scheduler flushes a device's kernels before it switches device, so the current
            # device is the kernel's.
            prefix = "async_compile.cpp_pybinding("
            device = V.graph.current_device
            if kernel_body.lstrip().startswith(prefix) and (device is None or device.type == "neuron"):
                body = kernel_body.lstrip()[len(prefix):]
                assert body.rstrip().endswith(")")
                kernel_body = f"neuron_cpp_kernel(async_compile, {body.rstrip()[:-1]}, name={kernel_name!r})"
            super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, **kwargs):
            from torch._inductor.virtualized import V

            device = device or V.graph.get_current_device_or_throw()
            if device.type == "neuron":
                device = torch.device("cpu")  # the call line is the same; the kernel object launches
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    from .. import _patches

    _patches.inductor_cpu_like_neuron()
    _patches.inductor_flex_attention_neuron()
    register_interface_for_device("neuron", NeuronInterface)
    for i in range(torch.neuron.device_count()):
        register_interface_for_device(f"neuron:{i}", NeuronInterface)
    register_device_op_overrides("neuron", NeuronDeviceOpOverrides())
    register_backend_for_device("neuron", cpp.CppScheduling, NeuronWrapperCodegen,
                                device_custom_pass=NeuronFlexAttentionPass())


_registered = False


def register() -> None:
    """Makes Inductor generate code for neuron tensors (called when the package loads)."""
    global _registered
    if not _registered:
        _register()
        _registered = True
