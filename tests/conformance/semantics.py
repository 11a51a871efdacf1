"""The harness's checks beyond a sample's values (harness.py runs them on every sample it compares
and once per OpInfo). Each returns None, or what disagrees with the CPU, naming the check:

  non-contiguous     the sample again with every tensor non-contiguous (SampleInput.noncontiguous),
                     after the contiguous run has warmed the caches up: values and layouts against
                     the CPU's run of the same non-contiguous sample
  out= on the CPU    a neuron call given CPU out= tensors (0-dim ones too) raises at the call,
                     as CUDA does, and writes nothing
  resize warning     out= tensors of the wrong, non-empty size warn on every call where the CPU does
  aliased out=       out= tensors whose elements alias (expanded ones) raise at the call where the
                     CPU raises, also after a strided out= call of the same op has run cleanly
  CPU raised         an in-place or out= variant the CPU rejects for a sample (an in-place call
                     whose self would have to broadcast) raises on neuron too, at the call
  error_inputs       the OpInfo's error inputs the CPU rejects raise on neuron, at the call, with
                     the same exception type; never only at a later synchronize
  other arguments    a sample with one non-tensor argument changed (to a value another sample of
                     the op gives it), right after a clean call of the sample as it was: its
                     result's shape and strides at the call, its values, and nothing failing at
                     the next synchronize
"""
from __future__ import annotations

import warnings


def raises_at_call(call, what):
    """None when `call()` raises and leaves no failing task behind; else what went wrong."""
    import torch

    try:
        call()
    except Exception:  # noqa: BLE001
        try:
            torch.neuron.synchronize()
        except Exception as e:  # noqa: BLE001
            return f"{what}: raised, and left a task that failed later: {type(e).__name__}: {e}"
        return None
    try:
        torch.neuron.synchronize()
    except Exception as e:  # noqa: BLE001
        return f"{what}: raised only at the next synchronize: {type(e).__name__}: {e}"
    return f"{what}: neuron did not raise"


def noncontiguous(op, ns, sample, values, device, compare, fresh):
    import torch

    nc_cpu = sample.noncontiguous()
    try:
        expected = op(nc_cpu.input, *nc_cpu.args, **nc_cpu.kwargs)
    except Exception:  # noqa: BLE001  (the CPU rejects the non-contiguous form)
        return None
    try:
        nc = fresh(ns).noncontiguous()
        actual = op(nc.input, *nc.args, **nc.kwargs)
        torch.neuron.synchronize()
        compare(actual, expected, values, device)
    except Exception as e:  # noqa: BLE001
        return f"non-contiguous: {type(e).__name__}: {e}"
    return None


def out_tensors(like, make):
    """out= tensors shaped like a result (a tensor or nested tuples of them): make(result tensor)."""
    import torch

    if isinstance(like, torch.Tensor):
        return make(like)
    return type(like)(out_tensors(v, make) for v in like)


def _resize_warnings(call) -> int:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            call()
        except Exception:  # noqa: BLE001
            return -1
    return sum("resized" in str(w.message) for w in seen)


def out_checks(op, ns, sample, expected, fresh):
    """The out= on the CPU and resize warning checks of one sample whose out= variant the CPU runs."""
    import torch

    def call(s, outs):
        return op(s.input, *s.args, **s.kwargs, out=outs)

    on_cpu = out_tensors(expected, lambda e: torch.empty_like(e))
    problem = raises_at_call(lambda: call(fresh(ns), on_cpu), "out= on the CPU")
    if problem:
        return problem

    def wrong_size(device):
        return out_tensors(expected, lambda e: torch.zeros((1,) if e.numel() != 1 else (2,), dtype=e.dtype,
                                                           device=device))

    cpu = [_resize_warnings(lambda: call(sample, wrong_size("cpu"))) for _ in range(2)]
    if min(cpu) < 0:
        return None  # the CPU rejects a wrong-size out= for this op
    neuron = []
    for _ in range(2):
        neuron.append(_resize_warnings(lambda: call(fresh(ns), wrong_size("neuron"))))
        torch.neuron.synchronize()
    if neuron != cpu:
        return f"resize warning: over two calls the CPU warned {cpu}, neuron {neuron} (-1: raised)"
    return _aliased_out(call, ns, sample, expected, fresh)


def _aliased_out(call, ns, sample, expected, fresh):
    import torch
    from torch.utils._pytree import tree_leaves

    if any(e.numel() < 2 for e in tree_leaves(expected)):
        return None

    def strided(device):  # not contiguous, but every element its own
        return out_tensors(expected, lambda e: torch.empty((*e.shape, 2), dtype=e.dtype, device=device)[..., 0])

    def aliased(device):  # over storage for every element: some CPU kernels ignore the strides
        def make(e):
            strides = list(torch.empty(e.shape, device="meta").stride())
            strides[next(d for d, n in enumerate(e.shape) if n > 1)] = 0
            return torch.empty(e.numel(), dtype=e.dtype, device=device).as_strided(e.shape, strides)
        return out_tensors(expected, make)

    try:
        call(sample, aliased("cpu"))
        return None  # the CPU writes such a tensor
    except Exception as e:  # noqa: BLE001
        cpu_error = e
    try:
        call(fresh(ns), strided("neuron"))
        torch.neuron.synchronize()
    except Exception:  # noqa: BLE001  (the op refuses strided out= tensors too: nothing to warm up)
        return None
    return raises_at_call(lambda: call(fresh(ns), aliased("neuron")),
                          f"aliased out= where the CPU raised {type(cpu_error).__name__}: {cpu_error}")


def error_inputs(op):
    """error_inputs of the OpInfo that the CPU rejects, run on neuron."""
    import torch

    try:
        cases = list(op.error_inputs("neuron"))
    except Exception:  # noqa: BLE001  (no error inputs, or they cannot be made on this device)
        return None
    for case in cases:
        s = case.sample_input
        cpu = s.transform(lambda t: t.cpu() if isinstance(t, torch.Tensor) and t.device.type == "neuron" else t)
        try:
            op(cpu.input, *cpu.args, **cpu.kwargs)
            continue  # the CPU accepts it (an error only other devices raise)
        except Exception as e:  # noqa: BLE001
            cpu_error = e
        what = f"error_inputs ({type(cpu_error).__name__}: {str(cpu_error).splitlines()[0][:120]})"
        raised = []

        def call():
            try:
                op(s.input, *s.args, **s.kwargs)
            except Exception as e:  # noqa: BLE001
                raised.append(e)
                raise

        problem = raises_at_call(call, what)
        if problem:
            return problem
        if not isinstance(raised[0], type(cpu_error)):
            return f"{what}: neuron raised {type(raised[0]).__name__}: {raised[0]}"
    return None


def _holds_tensor(value) -> bool:
    import torch
    from torch.utils._pytree import tree_leaves

    return any(isinstance(v, torch.Tensor) for v in tree_leaves(value))


def _variants(samples):
    """(sample, variant) pairs: each sample with one non-tensor argument changed to a value another
    sample of the op gives it (a keyword by name, a positional one by position among samples with
    as many arguments), e.g. reduction="none" for a sample that used the default."""
    import copy

    keywords, positions = {}, {}
    for s in samples:
        for name, v in s.kwargs.items():
            if not _holds_tensor(v):
                keywords.setdefault(name, {}).setdefault(repr(v), v)
        for i, v in enumerate(s.args):
            if not _holds_tensor(v):
                positions.setdefault((len(s.args), i), {}).setdefault(repr(v), v)
    for s in samples:
        for name, values in keywords.items():
            if _holds_tensor(s.kwargs.get(name)):
                continue
            for text, v in values.items():
                if name not in s.kwargs or repr(s.kwargs[name]) != text:
                    variant = copy.copy(s)
                    variant.kwargs = {**s.kwargs, name: v}
                    yield s, variant
        for i, a in enumerate(s.args):
            if _holds_tensor(a):
                continue
            for text, v in positions.get((len(s.args), i), {}).items():
                if repr(a) != text:
                    variant = copy.copy(s)
                    variant.args = (*s.args[:i], v, *s.args[i + 1:])
                    yield s, variant


def other_arguments(op, samples, values_for, compare, fresh, to_cpu, max_pairs):
    """Whether a non-tensor argument that changes a result (a reduction mode, a dim) is checked
    like a first call: after a clean call of a sample, the same sample with one such argument
    changed must have the CPU's shape and strides at the call and fail nothing later."""
    for n, (warm, sample) in enumerate(_variants(samples)):
        if n == max_pairs:
            break
        problem = _after_warm_up(op, warm, sample, values_for, compare, fresh, to_cpu)
        if problem:
            return problem
    return None


GROWS_UNINITIALISED = ("resize_", "resize_as_")


def _after_warm_up(op, warm, sample, values_for, compare, fresh, to_cpu):
    import torch

    cpu = to_cpu(sample)
    try:
        expected = op(cpu.input, *cpu.args, **cpu.kwargs)
    except Exception:  # noqa: BLE001  (the CPU rejects the sample: nothing to compare)
        return None
    # A variant may grow what a resize leaves uninitialised: only its shape and strides compare.
    values = values_for(sample) and not op.name.startswith(GROWS_UNINITIALISED)
    try:
        w = fresh(warm)
        op(w.input, *w.args, **w.kwargs)
        torch.neuron.synchronize()
    except Exception:  # noqa: BLE001  (the warm-up itself fails: the main comparison reports it)
        return None
    s = fresh(sample)
    try:
        actual = op(s.input, *s.args, **s.kwargs)
    except Exception as e:  # noqa: BLE001
        return f"other arguments: raised where the CPU did not: {type(e).__name__}: {e}"
    try:
        compare(actual, expected, False, "neuron")  # shapes before anything has synchronized
    except Exception as e:  # noqa: BLE001
        return f"other arguments: the result at the call: {type(e).__name__}: {e}"
    try:
        torch.neuron.synchronize()
    except Exception as e:  # noqa: BLE001
        return f"other arguments: raised only at the next synchronize: {type(e).__name__}: {e}"
    try:
        compare(actual, expected, values, "neuron")
    except Exception as e:  # noqa: BLE001
        return f"other arguments: {type(e).__name__}: {e}"
    return None
