"""FlexAttention (`torch.nn.attention.flex_attention`) under Inductor on neuron.

PyTorch lowers the flex_attention higher-order ops per device: a Triton template on CUDA (forward
and backward), a C++ template on the CPU (forward only, and without the logsumexp a backward
needs), Metal on MPS. Neuron's kernels come from Inductor's C++ code generator (inductor.py), so:

- a forward whose logsumexp and max nothing reads (inference): the CPU's fused C++ template, the
  kernel `torch.compile(flex_attention)` writes on the CPU, as one neuron kernel
  (`_patches.inductor_flex_attention_neuron` routes the lowering to `lower_forward` below);
- a forward whose logsumexp is read (training: the backward reads it; return_aux) or max, or that
  the template cannot write (no AVX2, a dtype it lacks), and every backward: this module's
  post-grad pass replaces the op by PyTorch's own dense implementation of it (`sdpa_dense`,
  `sdpa_dense_backward`, what eager mode runs: score_mod and mask_mod applied through vmap),
  traced into aten ops that Inductor fuses and compiles like any other graph: C++ kernels for the
  elementwise work, softmax and reductions, neuron matmuls for the products. Inductor has no
  fused backward but Triton's; the dense form is the one PyTorch itself defines these ops by, and
  it keeps every score_mod, mask_mod, captured tensor (with its gradient), GQA and broadcast batch
  the op supports. Its cost: the B x H x Lq x Lkv score matrix is materialised.

The pass is neuron's `device_custom_pass` (`register_backend_for_device`, Inductor's hook for an
out-of-tree backend), so it only ever sees graphs with neuron tensors. Eager mode needs nothing
here: PyTorch runs the dense implementation in neuron ops once `_patches.flex_attention_device_check`
lets neuron tensors in.
"""
from __future__ import annotations

import functools
import operator
import os

import torch
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files

_HOP = torch.ops.higher_order


def _on_neuron(node: torch.fx.Node) -> bool:
    query = node.args[0]
    val = query.meta.get("val") if isinstance(query, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.device.type == "neuron"


def _used_outputs(node: torch.fx.Node, everything=frozenset({0, 1, 2})) -> set:
    """The indices of node's tuple outputs that something reads (`everything` if it is not only
    indexed)."""
    used = set()
    for user in node.users:
        if user.op != "call_function" or user.target is not operator.getitem:
            return set(everything)
        used.add(user.args[1])
    return used


def fused_forward_supported(query) -> bool:
    """Whether the CPU's C++ flex_attention template can write this forward: it needs AVX2, and
    float32, bfloat16 or float16 inputs of one dtype."""
    from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported

    return check_cpu_supported() and query.dtype in (torch.float32, torch.bfloat16, torch.float16)


def _wants_dense(node: torch.fx.Node) -> bool:
    if node.target is _HOP.flex_attention_backward:
        return True
    query, key, value = (n.meta["val"] for n in node.args[:3])
    if not fused_forward_supported(query) or not query.dtype == key.dtype == value.dtype:
        return True
    return bool(_used_outputs(node) - {0})  # logsumexp or max: the template writes neither


def _dense_forward(*args):
    from torch._higher_order_ops.flex_attention import sdpa_dense

    out, lse, max_scores = sdpa_dense(*args)
    # The op's meta (flex_attention_fake_impl) has float32 statistics whatever the input dtype.
    return out, lse.to(torch.float32), max_scores.to(torch.float32)


def _dense_backward(*args):
    from torch._higher_order_ops.flex_attention import sdpa_dense_backward

    return sdpa_dense_backward(*args)


def _decompose(match, *args, **kwargs) -> None:
    """Replaces the matched op by the aten graph of its dense implementation, traced on the op's
    fake inputs with Inductor's decompositions."""
    from torch.utils import _pytree as pytree

    node = match.output_node()
    gm = node.graph.owning_module
    paths, spec = pytree.tree_flatten_with_path((args, kwargs))
    flat = [x for _, x in paths]
    fn, grads = _dense_forward, set()
    if node.target is _HOP.flex_attention_backward:
        # sdpa_dense_backward returns the gradient of each captured score_mod tensor that requires
        # grad; fake tensors of a backward graph require none, so those the graph reads are made to.
        fn = _dense_backward
        grads = set().union(*(_used_outputs(n, range(len(args[12]))) for n in node.users
                              if n.target is operator.getitem and n.args[1] == 3))
    tensors, requires_grad = [], []
    for path, x in paths:
        if isinstance(x, torch.fx.Node) and x.op != "get_attr":
            if grads and [getattr(k, "idx", None) for k in path[:2]] == [0, 12] and path[2].idx in grads:
                requires_grad.append(len(tensors))
            tensors.append(x)
    graphs = {x.target: _batchable(getattr(gm, x.target)) for x in flat
              if isinstance(x, torch.fx.Node) and x.op == "get_attr"}

    def dense(*values):
        it = iter(values)
        leaves = [x if not isinstance(x, torch.fx.Node) else
                  graphs[x.target] if x.op == "get_attr" else next(it) for x in flat]
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return fn(*args, **kwargs)

    device = node.args[0].meta["val"].device
    match.replace_by_example(dense, tensors, trace_fn=functools.partial(_trace, device=device,
                                                                        requires_grad=requires_grad))


def _batchable(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of a score_mod/mask_mod graph that vmap can batch. AOTAutograd decomposed it with
    Inductor's table, which writes dtype casts as prims.convert_element_type, an op without a
    batching rule; the copy casts with aten._to_copy, the op that was decomposed."""
    import copy

    gm = copy.deepcopy(gm)
    for node in gm.graph.find_nodes(op="call_function", target=torch.ops.prims.convert_element_type.default):
        x, dtype = node.args
        node.target, node.args, node.kwargs = torch.ops.aten._to_copy.default, (x,), {"dtype": dtype}
    gm.recompile()
    return gm


def _trace(fn, args, device, requires_grad=()) -> torch.fx.GraphModule:
    """fn's functional aten graph on fake args (a post-grad graph is functional: the dense backward
    fills its gradients with copy_), with Inductor's decompositions, traced twice: first without
    decompositions, so the vmaps that apply score_mod and mask_mod meet only ops with batching
    rules (a decomposition inside vmap can fall back to a per-element loop, which fake tensors
    make a very slow compile); then the plain graph with Inductor's decompositions."""
    from torch._inductor.pattern_matcher import fwd_only
    from torch.fx.experimental.proxy_tensor import make_fx

    functorch = torch._C._functorch
    fallback = functorch._is_vmap_fallback_enabled()
    functorch._set_vmap_fallback_enabled(False)
    try:
        examples = [x.detach().requires_grad_() if i in requires_grad else x for i, x in enumerate(args)]
        gm = make_fx(fn, tracing_mode="real")(*examples)
    except RuntimeError as e:
        if "Batching rule not implemented" not in str(e):
            raise
        raise NotImplementedError(f"neuron: flex_attention's score_mod or mask_mod uses an op vmap has no batching "
                                  f"rule for, so its dense form cannot be compiled: {e}") from e
    finally:
        functorch._set_vmap_fallback_enabled(fallback)
    _inline_scalar_constants(gm, device)
    return fwd_only(torch.func.functionalize(gm, remove="mutations"), args, run_functional_passes=False)


def _inline_scalar_constants(gm: torch.fx.GraphModule, device: torch.device) -> None:
    """The dense implementations make scalars with torch.tensor (-inf, 0), which tracing keeps as
    tensor attributes of the graph; a replacement graph takes call_function nodes only, so each
    becomes the `full` that makes it, on the op's device: a 0-dim tensor's device changes no result
    (it is a scalar to type promotion and broadcasting), and a CPU one would be a CPU buffer that
    Inductor writes with a kernel of its own in the neuron program."""
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

    for node in gm.graph.find_nodes(op="get_attr"):
        value = getattr(gm, node.target)
        if not isinstance(value, torch.Tensor):
            continue
        real = value.constant if isinstance(value, FakeTensor) else value
        if real is None or value.dim() != 0:
            raise NotImplementedError(f"neuron: flex_attention's dense form captured a {tuple(value.shape)} tensor")
        with unset_fake_temporarily():
            scalar = real.item()
        with gm.graph.inserting_before(node):
            full = gm.graph.call_function(torch.ops.aten.full.default, ([], scalar),
                                          {"dtype": value.dtype, "device": device})
        node.replace_all_uses_with(full)
        gm.graph.erase_node(node)
        delattr(gm, node.target)
    gm.recompile()


@functools.cache
def _patterns():
    from torch._inductor.pattern_matcher import CallFunctionVarArgs, PatternMatcherPass, register_graph_pattern

    patterns = PatternMatcherPass(pass_name="neuron_flex_attention")
    for target in (_HOP.flex_attention, _HOP.flex_attention_backward):
        register_graph_pattern(CallFunctionVarArgs(target), extra_check=_extra_check, pass_dict=patterns)(_decompose)
    return patterns


def _extra_check(match) -> bool:
    node = match.output_node()
    return _on_neuron(node) and _wants_dense(node)


class NeuronFlexAttentionPass(CustomGraphModulePass):
    """Inductor's post-grad pass for neuron graphs (see the module's note)."""

    def __call__(self, gm: torch.fx.GraphModule) -> None:
        changed = bool(_patterns().apply(gm))
        for node in gm.graph.find_nodes(op="call_function", target=_HOP.flex_attention):
            if _on_neuron(node):
                # Left for the fused template: its statistics are unused, so it is asked for none
                # (Dynamo sets OUTPUT_LOGSUMEXP whenever grad mode is on, inputs requiring grad or not).
                options = node.args[6]
                if options.get("OUTPUT_LOGSUMEXP") or options.get("OUTPUT_MAX"):
                    node.args = (*node.args[:6], {**options, "OUTPUT_LOGSUMEXP": False, "OUTPUT_MAX": False},
                                 *node.args[7:])
                    changed = True
        if changed:
            from torch._inductor import config

            if config.dce:  # the statistics a forward does not return (its max, say) are not computed
                gm.graph.eliminate_dead_code()
            gm.graph.lint()
            gm.recompile()

    def uuid(self):
        return _uuid()


@functools.cache
def _uuid() -> bytes:
    """Inductor's own cache keys include it: a changed pass or lowering route is a new program."""
    here = os.path.dirname(os.path.abspath(__file__))
    return get_hash_for_files((os.path.join(here, "flex_attention.py"), os.path.join(here, "..", "_patches.py")))


def lower_forward(query, *args):
    """The neuron lowering of a forward the pass left as the op: the CPU's C++ template."""
    from torch._inductor.kernel.flex.flex_cpu import lower_cpu

    return lower_cpu(query, *args)
