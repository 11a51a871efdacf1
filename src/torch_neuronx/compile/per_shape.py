"""A symbolic graph on neuron: a static program per input signature.

Dynamo hands the "neuron" backend a symbolic graph where it saw a dimension or an integer change
(automatic dynamic shapes), or where the user asked (`dynamic=True`, `mark_dynamic`). A neuron
program has static shapes, as on Trainium, so the graph is specialized at its first call with each
input signature (shapes, strides, dtypes, devices, requires_grad, grad mode), without a new Dynamo
trace: varying lengths never reach Dynamo's recompile limit.

Integers that size no tensor of the graph — a position offset, a counter such as the cumulative
length of a sliding-window KV cache — do not change the program's shapes, so they stay arguments
of it: the program is compiled with them symbolic, and a guard Inductor adds on one while
compiling (a branch it took, a value it assumed) is checked at each call; a call that fails it
compiles another program for its values.

A program is compiled at a call, after Dynamo's compile of the graph, and in the calling thread:
it is compiled as Dynamo compiles a frame, under Dynamo's compile lock (Inductor's pattern
registries, its cache folder, FX's tracing flag are process-wide) and inside a compile session
(torch.compiler.is_compiling() holds: another thread entering a compiled function meanwhile must
not take this compile's FX tracing for its own).
"""
from __future__ import annotations

import torch


def _shape_symbols(gm: torch.fx.GraphModule) -> set:
    """The symbols that size, stride or offset any tensor the graph computes or takes."""
    found: set = set()
    for node in gm.graph.nodes:
        for value in torch.utils._pytree.tree_leaves(node.meta.get("val", node.meta.get("example_value"))):
            if isinstance(value, torch.Tensor):
                for s in (*value.shape, *value.stride(), value.storage_offset()):
                    if isinstance(s, torch.SymInt):
                        found |= s.node.expr.free_symbols
    return found


def value_only_ints(gm: torch.fx.GraphModule, example_inputs) -> tuple:
    """Indices of the integer inputs that size no tensor (each a plain symbol of its own)."""
    shapes = _shape_symbols(gm)
    return tuple(i for i, x in enumerate(example_inputs)
                 if isinstance(x, torch.SymInt) and x.node.expr.is_Symbol and x.node.expr not in shapes)


def signature(args, value_only: tuple) -> tuple:
    """What a static program is specialized for: each tensor's shape, strides, dtype, device and
    whether it requires grad, each shape-giving integer's value, and the grad mode."""
    return (torch.is_grad_enabled(),) + tuple(
        (tuple(a.shape), tuple(a.stride()), a.dtype, a.device.type, a.requires_grad) if isinstance(a, torch.Tensor)
        else None if i in value_only else a for i, a in enumerate(args))


class _Program:
    """A compiled static program, and the guards on its symbolic integers it was compiled under."""

    def __init__(self, fn, guards: list, symbols: dict):
        self.fn, self.guards, self.symbols = fn, guards, symbols  # symbols: input index -> sympy symbol

    def admits(self, args) -> bool:
        if not self.guards:
            return True
        import sympy

        values = {sym: sympy.Integer(args[i]) for i, sym in self.symbols.items()}
        return all(bool(g.xreplace(values)) for g in self.guards)


class PerShape:
    """The callable the backend returns for a symbolic graph."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, compile_fn):
        self.gm, self.compile_fn = gm, compile_fn  # compile_fn(gm, inputs) -> a compiled callable
        self.value_only = value_only_ints(gm, example_inputs)
        self.programs: dict = {}  # signature -> [_Program]

    def __call__(self, *args):
        key = signature(args, self.value_only)
        for program in self.programs.get(key, ()):
            if program.admits(args):
                return program.fn(*args)
        from torch._dynamo.convert_frame import compile_lock

        with compile_lock, torch.compiler._compile_session_context():
            # two threads calling with a new signature compile it once
            program = next((p for p in self.programs.get(key, ()) if p.admits(args)), None)
            if program is None:
                program = self._specialize(args)
                self.programs.setdefault(key, []).append(program)
        return program.fn(*args)

    def _specialize(self, args) -> _Program:
        # Fake inputs with a shape environment even where nothing stays symbolic: Inductor's FX-graph
        # cache (what makes a second process warm) skips a graph compiled without one.
        import sympy
        from torch._dynamo.source import ConstantSource
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

        env = ShapeEnv()
        mode = FakeTensorMode(shape_env=env)
        inputs, own = [], {}
        for i, a in enumerate(args):
            if i in self.value_only:
                a = env.create_unspecified_symint_and_symbol(a, ConstantSource(f"sym_{i}"), DimDynamic.DYNAMIC)
                own[a.node.expr] = i
            elif isinstance(a, torch.Tensor):
                a = mode.from_tensor(a, static_shapes=True)
            inputs.append(a)
        fn = self.compile_fn(self.gm, inputs)
        if not own:
            return _Program(fn, [], {})
        # AOTAutograd makes the other integer inputs symbols too, named as these are: sym_<input index>.
        symbols = dict(own)
        for sym, sources in env.var_to_sources.items():
            for source in sources:
                name = getattr(source, "source_name", "")
                if name.startswith("sym_") and name[4:].isdigit():
                    symbols[sym] = int(name[4:])
        # What compiling fixed about a symbol: its guards, and a replacement (by a constant or another
        # expression) holds only where the replacement does.
        guards = [g.expr for g in env.guards]
        guards += [sympy.Eq(sym, env.replacements[sym]) for sym in symbols if sym in env.replacements]
        if any(not g.free_symbols <= symbols.keys() for g in guards):  # one this cannot check: exact values
            symbols = own
            guards = [sympy.Eq(sym, args[i]) for sym, i in own.items()]
        return _Program(fn, guards, {i: sym for sym, i in symbols.items()})
