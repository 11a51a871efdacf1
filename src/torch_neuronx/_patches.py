"""Every change this package makes to PyTorch's own Python modules, in one place (those to the
Hugging Face libraries are in _patches_hf.py). Each works around one upstream behaviour, named in
its docstring; none changes what other devices do."""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
import warnings

import torch


def tensor_printing() -> None:
    """torch._tensor_str formats values through float64, which Trainium lacks (and which would
    warn): neuron tensors are formatted from a host copy; the device suffix stays."""
    import torch._tensor_str as ts

    inner = ts._tensor_str
    if getattr(inner, "_neuron", False):
        return

    def _tensor_str(self, indent):
        if self.device.type == "neuron":
            self = self.cpu()
        return inner(self, indent)

    _tensor_str._neuron = True
    ts._tensor_str = _tensor_str


_pending: dict = {}  # module name -> patches waiting for its import


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target_module=None):
        patches = _pending.pop(name, None)
        if patches is None:
            return None
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            for patch in patches:
                patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


class _PatchWhenLoaded:
    """Mixed into the class of the spec of a module whose import is under way when a patch for it
    is asked for (it imported torch, which autoloaded this package: `import
    transformers.modeling_utils` as a program's first import). importlib clears the spec's
    `_initializing` once the module's code has run (importlib._bootstrap._load_unlocked, in a
    `finally`): the waiting patches run then, on the whole module, and the spec gets its own class
    back."""

    @property
    def _initializing(self):
        return self.__dict__.get("_initializing", False)

    @_initializing.setter
    def _initializing(self, value):
        self.__dict__["_initializing"] = value
        if value:
            return
        self.__class__ = self.__dict__.pop("_neuron_class")
        patches = self.__dict__.pop("_neuron_patches")
        module = sys.modules.get(self.name)
        if getattr(module, "__spec__", None) is not self:  # its code raised: a later import retries
            _pending.setdefault(self.name, []).extend(patches)
            return
        for patch in patches:
            patch(module)


def after_import(target: str, patch) -> None:
    """Runs patch(module) once `target` is imported (now, if it already is): heavy modules are
    patched when, and if, something imports them. A module whose import is still running (it is in
    sys.modules, half-initialised) is patched when that import finishes."""
    module = sys.modules.get(target)
    spec = getattr(module, "__spec__", None)
    if module is not None and getattr(spec, "_initializing", False):
        if not isinstance(spec, _PatchWhenLoaded):
            cls = type(spec)
            spec.__dict__.update(_neuron_class=cls, _neuron_patches=[])
            spec.__class__ = type(cls.__name__, (_PatchWhenLoaded, cls), {})
        spec._neuron_patches.append(patch)
        return
    if module is not None:
        patch(module)
        return
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
    _pending.setdefault(target, []).append(patch)


def linear_cross_entropy_defaults() -> None:
    """linear_cross_entropy's chunked path picks its accumulation dtype and policy per device
    (torch.nn.modules.linear_cross_entropy_options._AUTO_DEFAULTS) and gives devices it does not
    list bfloat16/float16 accumulation. Trainium's matmul engine accumulates in float32 (PSUM), so
    neuron declares what the CPU declares: float32 accumulation, with the CPU's policy."""
    try:
        from torch.nn.modules import linear_cross_entropy_options as lce
    except ImportError:
        return
    options = getattr(lce, "LinearCrossEntropyOptions", None)
    resolve = getattr(options, "_resolve_auto_acc_dtype", None)
    if not hasattr(lce, "_AUTO_DEFAULTS") or resolve is None:
        return
    for dtype in (torch.bfloat16, torch.float16):
        cpu = lce._AUTO_DEFAULTS.get(("cpu", dtype))
        if cpu is not None:
            lce._AUTO_DEFAULTS.setdefault(("neuron", dtype), cpu)

    def resolve_auto_acc_dtype(dtype, device):
        if device is not None and device.type == "neuron" and dtype in (torch.float16, torch.bfloat16):
            return torch.float32
        return resolve(dtype, device)

    options._resolve_auto_acc_dtype = staticmethod(resolve_auto_acc_dtype)


def inductor_cpu_like_neuron() -> None:
    """Inductor's scheduler asks `node.is_cpu()` (device.type == "cpu") to pick the fusion and
    loop-reindexing rules of its C++ code generator, which writes neuron's kernels too (the software
    NeuronCore's memory is host-addressable). Neuron nodes answer as CPU nodes do there. Applied
    only when Inductor is set up for neuron (torch_neuronx.compile.inductor), to each module as
    Inductor imports it: a compile served from the cache never imports the lowering modules."""

    def patch_scheduler(scheduler):
        is_cpu = scheduler.BaseSchedulerNode.is_cpu
        if getattr(is_cpu, "_neuron", False):
            return

        def neuron_or_cpu(self) -> bool:
            device = self.get_device()
            return device is not None and device.type in ("cpu", "neuron")

        neuron_or_cpu._neuron = True
        scheduler.BaseSchedulerNode.is_cpu = neuron_or_cpu

    after_import("torch._inductor.scheduler", patch_scheduler)

    # torch._inductor.utils.get_current_backend names the code generator of the current device
    # and answers "triton" (config.cuda_backend) for devices it does not list; neuron's is the C++
    # one (config.cpu_backend). Each module that imported the function gets the wrapped one.
    from torch._inductor import utils

    original = utils.get_current_backend
    if getattr(original, "_neuron", False):
        return

    def current_backend(device_type=None):
        from torch._inductor.virtualized import V

        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        return original("cpu" if device_type == "neuron" else device_type)

    current_backend._neuron = True
    for name in ("torch._inductor.utils", "torch._inductor.codegen.common", "torch._inductor.scheduler",
                 "torch._inductor.kernel.mm_common"):
        after_import(name, lambda m: _rebind(original, current_backend, {m.__name__: ["get_current_backend"]}))


def _rebind(original, replacement, modules: dict) -> None:
    """Modules that bound `original` by name before it was patched get `replacement`."""
    for module_name, attrs in modules.items():
        module = sys.modules.get(module_name)
        for attr in attrs:
            if module is not None and getattr(module, attr, None) is original:
                setattr(module, attr, replacement)


class _MeshGroupKey(tuple):
    """The (device, dtype) key of a foreach group, unpacking as before, kept apart from the
    group of the same device and dtype whose tensors are plain or on another mesh."""

    def __new__(cls, key, mesh):
        self = super().__new__(cls, key)
        self.mesh = mesh
        return self

    def __hash__(self):
        return hash((tuple(self), self.mesh))

    def __eq__(self, other):
        return tuple.__eq__(self, other) is True and getattr(other, "mesh", None) == self.mesh

    def __ne__(self, other):
        return not self == other


def optimizer_foreach_groups_by_mesh() -> None:
    """torch.optim's foreach implementations (adam.py's _multi_tensor_adam and the others) run one
    foreach kernel per group of Optimizer._group_tensors_by_device_and_dtype, which groups by
    device and dtype only. torch.distributed.tensor adds DTensor to the types foreach accepts
    (optimizer._foreach_supported_types), so on the foreach devices (cuda, the PrivateUse1 device:
    torch.utils._foreach_utils._get_foreach_kernels_supported_devices) the default optimizer over
    a model whose parameters are only partly DTensors (tensor parallelism alone: transformers'
    tp_plan shards the projections and leaves embeddings, norms and lm_head plain) puts both in
    one group, and DTensor refuses the kernel: "aten._foreach_mul_.Scalar got mixed torch.Tensor
    and DTensor". CUDA fails the same way (nothing on that path depends on the device). On
    neuron such a group is split by mesh (plain tensors together, each mesh's DTensors together),
    as transformers' Trainer splits param groups (trainer_optimizer.has_mixed_dtensor): each
    kernel sees one kind of tensor, and the update is the per-tensor loop's."""

    def patch(optimizer):
        group = optimizer.Optimizer._group_tensors_by_device_and_dtype
        if getattr(group, "_neuron", False):
            return

        def group_tensors_by_device_and_dtype(tensorlistlist, with_indices=False):
            grouped = group(tensorlistlist, with_indices)
            if torch.compiler.is_compiling():
                return grouped
            dtensor = sys.modules.get("torch.distributed.tensor")  # no DTensor before it is imported
            if dtensor is None:
                return grouped
            out = {}
            for key, (lists, indices) in grouped.items():
                device = key[0]
                meshes = None  # per tensor: its DTensor mesh, None for a plain tensor
                if getattr(device, "type", None) == "neuron":
                    meshes = [t.device_mesh if isinstance(t, dtensor.DTensor) else None for t in lists[0]]
                if meshes is None or len(set(meshes)) < 2:
                    out[key] = (lists, indices)
                    continue
                parts = {}
                for j, mesh in enumerate(meshes):
                    part_lists, part_indices = parts.setdefault(mesh, ([[] for _ in lists], []))
                    for i, tensors in enumerate(lists):
                        if tensors:  # a list the optimizer does not use (amsgrad's when off) is empty
                            part_lists[i].append(tensors[j])
                    if indices:
                        part_indices.append(indices[j])
                for mesh, part in parts.items():
                    out[key if mesh is None else _MeshGroupKey(key, mesh)] = part
            return out if len(out) > len(grouped) else grouped  # nothing split: PyTorch's own answer

        group_tensors_by_device_and_dtype._neuron = True
        group_tensors_by_device_and_dtype.__wrapped__ = group
        optimizer.Optimizer._group_tensors_by_device_and_dtype = staticmethod(group_tensors_by_device_and_dtype)

    after_import("torch.optim.optimizer", patch)


def grad_scaler_float32_reciprocal() -> None:
    """torch.amp.GradScaler.unscale_ takes the scale's reciprocal in float64
    (`self._scale.double().reciprocal().float()`) on every device but MPS, which has no float64
    and takes `self._scale.reciprocal()`. Trainium has no float64 either (it warns, and raises under
    TORCH_NEURONX_STRICT=1), so a neuron scaler takes MPS's path: for the call, its scale tensor's
    own `double` answers the tensor itself. The CPU kernel's float32 division is correctly rounded,
    and scales are powers of two, so the reciprocal has the same bits."""
    from torch.amp import grad_scaler

    original = grad_scaler.GradScaler.unscale_
    if getattr(original, "_neuron", False):
        return

    def unscale_(self, optimizer):
        scale = self._scale
        if scale is None or scale.device.type != "neuron":
            return original(self, optimizer)
        scale.double = lambda: scale  # an instance attribute, shadowing Tensor.double for this tensor only
        try:
            return original(self, optimizer)
        finally:
            del scale.double

    unscale_._neuron = True
    unscale_.__wrapped__ = original
    grad_scaler.GradScaler.unscale_ = unscale_


def inductor_neuron_compile_cache(compile_fx_module) -> None:
    """Inductor has one cache folder per process for every device's graphs (TORCHINDUCTOR_CACHE_DIR,
    read at each use); neuron programs have their own cache (torch_neuronx.compile.cache: versioned,
    verified, evicted whole). torch._inductor.compile_fx.compile_fx is the default backend's entry
    (torch.compile's Inductor wrapper and Dynamo's "inductor" backend import it at each call): a
    graph whose inputs are on neuron is compiled with the neuron cache, as the "neuron" backend's
    graphs are, and replayed from a NeuronGraph in mode "reduce-overhead" (Inductor's CUDA graphs
    apply to CUDA only); any other graph goes through unchanged, with Inductor's own cache."""

    original = compile_fx_module.compile_fx
    if getattr(original, "_neuron", False):
        return

    @functools.wraps(original)
    def compile_fx(model_, example_inputs_, *args, **kwargs):
        if not any(isinstance(x, torch.Tensor) and x.device.type == "neuron" for x in example_inputs_):
            return original(model_, example_inputs_, *args, **kwargs)
        from torch._inductor import config

        from .compile import cache, graphed

        outermost = not cache.compiling()  # compile_fx calls itself with its patches
        patches = kwargs.get("config_patches") or {}
        compiled = cache.compile_with_cache(model_, example_inputs_, patches,
                                            lambda: original(model_, example_inputs_, *args, **kwargs))
        # mode="reduce-overhead" asks Inductor for CUDA graphs, which it skips off CUDA: NeuronGraph instead
        if outermost and patches.get("triton.cudagraphs", config.triton.cudagraphs):
            return graphed.Graphed(compiled)
        return compiled

    compile_fx._neuron = True
    compile_fx_module.compile_fx = compile_fx


def dynamo_reset_calls_again(watch) -> None:
    """torch._dynamo.reset() clears Dynamo's compile callbacks (torch._dynamo.callback), with which
    torch_neuronx times every frame compile for compile_stats(): after a reset, `watch` registers
    them again."""
    import torch._dynamo

    reset = torch._dynamo.reset
    if getattr(reset, "_neuron", False):
        return

    def reset_and_watch() -> None:
        reset()
        watch()

    reset_and_watch._neuron = True
    reset_and_watch.__wrapped__ = reset
    torch._dynamo.reset = reset_and_watch


def nested_sdpa_on_jagged_values() -> None:
    """SDPA of jagged nested tensors in the (B, H, j, D) layout (torch.nested._internal.sdpa): its
    math path converts them to strided-layout nested tensors, whose ops have kernels only for
    NestedTensorCPU and NestedTensorCUDA, and NestedTensor.__torch_function__ swallows the
    NotImplementedError and calls the dense SDPA, which fails with "If inputs are nested tensors
    they must be contiguous". On neuron the same math runs per sequence on the jagged values."""

    def patch(njt_ops):
        import torch.nested._internal.sdpa as njt_sdpa
        from torch.nested._internal.nested_tensor import nested_view_from_values_offsets_lengths
        from torch.nn.attention import SDPBackend

        original = njt_sdpa.jagged_scaled_dot_product_attention

        def per_sequence(nt):  # (B, H, j, D) -> B dense (H, j_i, D)
            lengths = (nt._offsets[1:] - nt._offsets[:-1]).tolist()
            return [t.transpose(0, 1) for t in nt.transpose(1, 2).values().split(lengths, dim=0)]

        def jagged_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                        enable_gqa=False):
            args = (attn_mask, dropout_p, is_causal, scale, enable_gqa)
            if query.device.type != "neuron" or query.dim() <= 3 or query._ragged_idx != 2:
                return original(query, key, value, *args)
            query, key, value, attn_mask = njt_sdpa._autocast(query, key, value, attn_mask)
            njt_sdpa._validate_sdpa_input(query, key, value, attn_mask, dropout_p, is_causal, scale)
            choice = njt_sdpa._select_sdp_backend(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
            if choice == SDPBackend.ERROR:
                raise RuntimeError("No viable backend for scaled_dot_product_attention was found.")
            if choice != SDPBackend.MATH:
                return original(query, key, value, attn_mask, *args[1:])
            outs = [torch._scaled_dot_product_attention_math(q, k, v, None, dropout_p, is_causal, scale=scale,
                                                             enable_gqa=enable_gqa)[0].transpose(0, 1)
                    for q, k, v in zip(per_sequence(query), per_sequence(key), per_sequence(value))]
            return nested_view_from_values_offsets_lengths(
                torch.cat(outs), query.offsets(), lengths=query.lengths(), min_seqlen=query._maybe_min_seqlen,
                max_seqlen=query._maybe_max_seqlen).transpose(1, 2)

        njt_sdpa.jagged_scaled_dot_product_attention = jagged_sdpa
        njt_ops.jagged_scaled_dot_product_attention = jagged_sdpa  # bound by name when ops.py loaded

    after_import("torch.nested._internal.ops", patch)


def flex_attention_device_check() -> None:
    """torch.nn.attention.flex_attention._validate_device refuses every device but cuda, cpu, xpu,
    hpu and mps ("FlexAttention is only supported on CUDA, CPU, HPU, or MPS devices") before the
    op is called, although nothing past it depends on the device: eager mode runs the op's dense
    implementation (sdpa_dense and sdpa_dense_backward, ordinary neuron ops), and Inductor lowers
    it for neuron (torch_neuronx.compile.flex_attention). Neuron tensors pass, with backward, as
    CUDA's do; other devices get PyTorch's own check."""

    def patch(flex):
        original = getattr(flex, "_validate_device", None)
        if original is None or getattr(original, "_neuron", False):
            return

        def validate_device(query, key, value):
            if query.device.type == "neuron":
                return None
            return original(query, key, value)

        validate_device._neuron = True
        validate_device.__wrapped__ = original
        flex._validate_device = validate_device

    after_import("torch.nn.attention.flex_attention", patch)


def inductor_flex_attention_neuron() -> None:
    """Inductor's lowering of the flex_attention op (torch._inductor.kernel.flex.flex_attention.
    flex_attention, the entry of torch._inductor.lowering.lowerings) picks the CPU's C++ template
    for device type "cpu", Metal for "mps" and Triton for any other device. Neuron's kernels are
    written by the C++ code generator, so a neuron forward gets the CPU's template (the forwards it
    cannot write were already replaced by torch_neuronx.compile.flex_attention's pass). Applied
    only when Inductor is set up for neuron (torch_neuronx.compile.inductor)."""
    def patch(_flex_module):
        from torch._inductor.lowering import lowerings

        op = torch.ops.higher_order.flex_attention
        original = lowerings[op]
        if getattr(original, "_neuron", False):
            return

        def flex_attention(query, *args, **kwargs):
            if query.get_device().type == "neuron":
                from .compile.flex_attention import lower_forward

                return lower_forward(query, *args, **kwargs)
            return original(query, *args, **kwargs)

        flex_attention._neuron = True
        flex_attention.__wrapped__ = original
        lowerings[op] = flex_attention

    # the module that registers flex_attention's lowering, imported with Inductor's lowerings
    after_import("torch._inductor.kernel.flex.flex_attention", patch)


def dynamo_function_names_when_logged() -> None:
    """Dynamo names the enclosing function of each traced call for its trace_call and trace_source
    debug logs (torch._dynamo.funcname_cache.get_funcname, which tokenizes each source file it
    meets), and does so whether or not those logs are on: about half a second of every first compile
    in a process, a fifth of a warm start from the compile cache. The name is looked up only where
    one of those logs is on; the log lines are otherwise unchanged."""

    def patch(symbolic_convert):
        original = symbolic_convert.get_funcname
        if getattr(original, "_neuron", False):
            return
        import logging

        from torch._dynamo import output_graph

        logs = (symbolic_convert.trace_call_log, symbolic_convert.trace_source_log, output_graph.trace_call_log)

        @functools.wraps(original)
        def get_funcname(filename, lineno):
            if any(log.isEnabledFor(logging.DEBUG) for log in logs):
                return original(filename, lineno)
            return None

        get_funcname._neuron = True
        symbolic_convert.get_funcname = get_funcname

    after_import("torch._dynamo.symbolic_convert", patch)


def dynamo_backend_registered_once() -> None:
    """Dynamo's lookup_backend registers an entry-point backend ("neuron") at its first use; two
    threads calling torch.compile at once both do, and the second fails with 'duplicate name:
    neuron'. The very function already registered under that name is no duplicate (others are)."""

    def patch(registry):
        original = registry.register_backend
        if getattr(original, "_neuron", False):
            return

        @functools.wraps(original)
        def register_backend(compiler_fn=None, name=None, tags=()):
            if compiler_fn is not None and registry._COMPILER_FNS.get(name or compiler_fn.__name__) is compiler_fn:
                return compiler_fn
            return original(compiler_fn, name, tags)

        register_backend._neuron = True
        registry.register_backend = register_backend

    after_import("torch._dynamo.backends.registry", patch)


def process_group_timeouts() -> None:
    """torch.distributed.distributed_c10d._set_pg_timeout (what TorchTitan calls once its first
    steps have compiled, to shorten the timeout again) hands the new timeout to a group's gloo and
    NCCL backends only, and warns "Set timeout is now only supported for either nccl or gloo" for
    any other: a neuron group kept the timeout it was created with. A group's neuron backend takes
    it as those do (ProcessGroupNeuron::setTimeout); the group's other backends are PyTorch's."""

    def patch(c10d):
        original = c10d._set_pg_timeout
        if getattr(original, "_neuron", False):
            return

        def pytorchs(timeout, group):
            # PyTorch's warning for a group it cannot reach (a "fake" one, say) names the
            # caller's line (stacklevel=2); from here it would name this file instead.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                original(timeout, group)
            for w in caught:
                warnings.warn(w.message, w.category, stacklevel=3)

        @functools.wraps(original)
        def set_pg_timeout(timeout, group=None):
            pg = group if group is not None else c10d._get_default_group()
            neuron = torch.device("neuron")
            if c10d._rank_not_in_group(pg) or neuron not in pg._device_types:
                return pytorchs(timeout, group)
            from . import _C

            _C._set_process_group_timeout(pg._get_backend(neuron), timeout)
            if any(d != neuron for d in pg._device_types):  # "cpu:gloo,neuron:neuron": gloo's too
                pytorchs(timeout, group)

        set_pg_timeout._neuron = True
        c10d._set_pg_timeout = set_pg_timeout

    after_import("torch.distributed.distributed_c10d", patch)


_META_LIB = None  # the Library holding the replaced meta kernel (it unregisters when collected)


def grouped_mm_meta_dtypes() -> None:
    """torch._grouped_mm's kernels (the CPU's, CUDA's fallback) take float32, float16 and bfloat16,
    but its meta kernel keeps the CUDA fast path's bfloat16-only check: a float32 MoE layer can be
    neither traced (fake tensors) nor sized before its kernel runs (neuron then waits for it). The
    replaced meta kernel runs the original's checks on bfloat16 stand-ins (strides scaled by the
    element size, so its 16-byte alignment checks mean what they mean for the real dtype) and sizes
    the result in the real dtype. It only accepts calls the kernels accept, on any device."""
    global _META_LIB
    from torch._decomp import meta_table
    from torch._meta_registrations import _create_grouped_mm_output_tensor

    op = torch.ops.aten._grouped_mm.default
    original = meta_table.get(op)
    if original is None or _META_LIB is not None:
        return

    def stand_in(t):
        if t.dtype not in (torch.float32, torch.float16):
            return t
        scale = t.element_size() // 2
        strides = [s if s == 1 else s * scale for s in t.stride()]
        return torch.empty_strided(t.shape, strides, dtype=torch.bfloat16, device="meta")

    def meta(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        dtypes = (mat_a.dtype, mat_b.dtype)
        if dtypes == (torch.bfloat16, torch.bfloat16) or mat_a.dtype != mat_b.dtype:
            return original(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
        torch._check(out_dtype in (None, mat_a.dtype),
                     lambda: f"If output dtype provided, it must be the inputs' ({mat_a.dtype}).")
        original(stand_in(mat_a), stand_in(mat_b), offs=offs, bias=bias)
        return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)

    # Three places hold it: the dispatcher's Meta kernel, the Python dispatcher's (Dynamo traces
    # with it) and the table fake tensors consult.
    _META_LIB = torch.library.Library("aten", "IMPL", "Meta")
    _META_LIB.impl(op, meta)
    op.py_kernels[torch._C.DispatchKey.Meta] = meta
    op._dispatch_cache.clear()
    meta_table[op] = meta


def install() -> None:
    tensor_printing()
    linear_cross_entropy_defaults()
    optimizer_foreach_groups_by_mesh()
    grad_scaler_float32_reciprocal()
    nested_sdpa_on_jagged_values()
    flex_attention_device_check()
    dynamo_function_names_when_logged()
    dynamo_backend_registered_once()
    process_group_timeouts()
    grouped_mm_meta_dtypes()
