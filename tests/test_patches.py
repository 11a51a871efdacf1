"""Each patch of src/torch_neuronx/_patches.py and _patches_hf.py is in place, and what it patches
upstream is still what it was written against: a PyTorch upgrade that changes it fails here, naming
the patch, instead of silently changing what neuron does. (The accelerate and optimizer patches
have their guards beside their tests: test_hf_stack.py, test_distributed.py.)"""
import inspect
import re

import pytest
import torch

from conftest import run_python


def _source(fn) -> str:
    return inspect.getsource(getattr(fn, "__wrapped__", fn))


def test_tensor_printing():
    import torch._tensor_str as ts

    assert getattr(ts._tensor_str, "_neuron", False), "patch tensor_printing is not installed"
    assert "float64" in _source(ts._Formatter.__init__) or "double" in _source(ts._Formatter.__init__), \
        "patch tensor_printing: torch._tensor_str no longer formats through float64; the patch may be unneeded"
    assert str(torch.tensor([1.5], device="neuron")) == "tensor([1.5000], device='neuron:0')"


def test_generate_static_cache_programs():
    import transformers
    import transformers.generation.utils as gen

    from torch_neuronx import _patches_hf

    assert getattr(gen.GenerationMixin._prepare_cache_for_generation, "_neuron", False), \
        "patch generate_static_cache_programs is not installed"
    assert getattr(transformers.PreTrainedModel.get_compiled_call, "_neuron", False), \
        "patch generate_static_cache_programs is not installed"
    params = list(inspect.signature(gen.GenerationMixin._prepare_cache_for_generation.__wrapped__).parameters)
    assert params == ["self", "generation_config", "model_kwargs", "generation_mode", "batch_size",
                      "max_cache_length"], f"patch generate_static_cache_programs: the parameters changed: {params}"
    layer = transformers.cache_utils.StaticSlidingWindowLayer(max_cache_len=16, sliding_window=8)
    assert re.fullmatch(_patches_hf.SLIDING_WINDOW_LENGTHS, "L['self'].layers[0].cumulative_length_int") and \
        isinstance(layer.cumulative_length_int, int), \
        "patch generate_static_cache_programs: the sliding-window layer no longer counts in cumulative_length_int"


def test_dynamo_function_names_when_logged():
    import logging

    import torch._dynamo.symbolic_convert as sc
    from torch._dynamo import output_graph

    assert getattr(sc.get_funcname, "_neuron", False), "patch dynamo_function_names_when_logged is not installed"
    assert "get_funcname(" in _source(sc.InstructionTranslatorBase.get_line_of_code_header), \
        "patch dynamo_function_names_when_logged: Dynamo's log header no longer names the function"
    assert "get_line_of_code_header" in inspect.getsource(output_graph.SubgraphTracer._create_proxy), \
        "patch dynamo_function_names_when_logged: _create_proxy changed (the eager lookup may be gone)"
    here = inspect.getsourcefile(test_dynamo_function_names_when_logged)
    line = test_dynamo_function_names_when_logged.__code__.co_firstlineno
    assert sc.get_funcname(here, line + 1) is None  # no trace log on: not looked up
    sc.trace_source_log.setLevel(logging.DEBUG)
    try:
        assert sc.get_funcname(here, line + 1) == "test_dynamo_function_names_when_logged"
    finally:
        sc.trace_source_log.setLevel(logging.NOTSET)


def test_linear_cross_entropy_defaults():
    try:
        from torch.nn.modules import linear_cross_entropy_options as lce
    except ImportError:
        pytest.skip("this PyTorch has no linear_cross_entropy options")
    resolve = lce.LinearCrossEntropyOptions._resolve_auto_acc_dtype
    assert resolve(torch.bfloat16, torch.device("neuron")) == torch.float32, "patch linear_cross_entropy_defaults"
    assert ("neuron", torch.bfloat16) in lce._AUTO_DEFAULTS, "patch linear_cross_entropy_defaults"


def _holds_in_a_fresh_interpreter(patch: str, checks: str) -> None:
    """Inductor's patches apply when Inductor loads: checked where nothing else loaded it first."""
    r = run_python("import inspect, torch\n" + checks + "print('ok')\n", timeout=300)
    assert r.stdout.strip().endswith("ok"), f"patch {patch}: " + r.stdout + r.stderr[-3000:]


def test_inductor_cpu_like_neuron():
    _holds_in_a_fresh_interpreter("inductor_cpu_like_neuron", (
        "torch.compile(lambda x: x + 1)(torch.ones(2, device='neuron'))\n"
        "from torch._inductor import scheduler, utils\n"
        "assert getattr(scheduler.BaseSchedulerNode.is_cpu, '_neuron', False), 'is_cpu not patched'\n"
        "assert utils.get_current_backend('neuron') == utils.get_current_backend('cpu'), 'get_current_backend'\n"))


def test_grad_scaler_float32_reciprocal():
    from torch.amp import grad_scaler

    unscale = grad_scaler.GradScaler.unscale_
    assert getattr(unscale, "_neuron", False), "patch grad_scaler_float32_reciprocal is not installed"
    assert "self._scale.double().reciprocal().float()" in _source(unscale), \
        "patch grad_scaler_float32_reciprocal: GradScaler.unscale_ no longer takes the reciprocal in float64"


def test_inductor_neuron_compile_cache():
    _holds_in_a_fresh_interpreter("inductor_neuron_compile_cache", (
        "import torch._inductor.compile_fx as cfx\n"
        "assert getattr(cfx.compile_fx, '_neuron', False), 'not installed'\n"
        "params = list(inspect.signature(cfx.compile_fx.__wrapped__).parameters)\n"
        "assert params[:2] == ['model_', 'example_inputs_'], params\n"))


def test_flex_attention_device_check():
    import torch.nn.attention.flex_attention as flex

    check = flex._validate_device
    assert getattr(check, "_neuron", False), "patch flex_attention_device_check is not installed"
    source = _source(check)
    assert "supported_devices" in source and "neuron" not in source, \
        "patch flex_attention_device_check: _validate_device changed (it may accept neuron: the patch may be unneeded)"


def test_inductor_flex_attention_neuron():
    _holds_in_a_fresh_interpreter("inductor_flex_attention_neuron", (
        "import torch._inductor.compile_fx\n"
        "from torch._inductor.lowering import lowerings\n"
        "lowering = lowerings[torch.ops.higher_order.flex_attention]\n"
        "assert getattr(lowering, '_neuron', False), 'not installed'\n"
        "source = inspect.getsource(inspect.unwrap(lowering))\n"
        "assert 'query.get_device().type == \"cpu\"' in source and 'lower_cpu(' in source, "
        "'the lowering no longer picks the C++ template by the device type \"cpu\"'\n"
        "from torch._inductor.codegen.common import custom_backend_passes\n"
        "assert custom_backend_passes.get('neuron') is not None, 'the neuron post-grad pass is not registered'\n"))


def test_dynamo_reset_calls_again():
    import torch._dynamo
    from torch._dynamo.callback import callback_handler

    from torch_neuronx.compile import stats

    torch._dynamo.reset()  # clears Dynamo's compile callbacks; the patch registers neuron's again
    assert stats._frame_started in callback_handler.start_callbacks
    assert stats._frame_ended in callback_handler.end_callbacks


def test_dynamo_backend_registered_once():
    from torch._dynamo.backends import registry

    from torch_neuronx.compile.backend import neuron_backend

    assert getattr(registry.register_backend, "_neuron", False), "patch dynamo_backend_registered_once is not installed"
    assert "register_backend(" in inspect.getsource(registry.lookup_backend), \
        "patch dynamo_backend_registered_once: lookup_backend no longer registers an entry-point backend"
    assert registry.lookup_backend("neuron") is neuron_backend
    assert registry.register_backend(neuron_backend, "neuron") is neuron_backend  # a second thread's load
    with pytest.raises(AssertionError, match="duplicate name: neuron"):
        registry.register_backend(lambda gm, inputs: gm, "neuron")


def test_patch_waits_for_a_module_whose_import_is_running():
    # transformers.modeling_utils as a program's first import imports torch, which autoloads this
    # package while modeling_utils is half-initialised: its patch must wait for the whole module
    r = run_python("import transformers.modeling_utils as m, torch\n"
                   "assert getattr(m.PreTrainedModel.get_compiled_call, '_neuron', False)\n"
                   "assert type(m.__spec__).__name__ == 'ModuleSpec' and not m.__spec__._initializing\n"
                   "x = torch.ones(3)\n"
                   "print((x + 1).sum().item(), (x.to('neuron') + 1).sum().item())")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["6.0", "6.0"]


def test_after_import_patches_half_imported_modules_when_they_finish(tmp_path):
    # the mechanism itself: a patch asked for in the middle of a module's code sees the whole module,
    # and one whose module's code raised waits for the import that succeeds
    (tmp_path / "half.py").write_text(
        "import os\nfrom torch_neuronx._patches import after_import\n"
        "after_import('half', lambda m: print('patched', m.LATE))\n"
        "if os.environ.get('HALF_FAIL') == '1':\n    os.environ['HALF_FAIL'] = '0'\n    raise ValueError('first try')\n"
        "LATE = 'late'\nprint('body done')\n")
    code = ("import os, torch\n"
            "try:\n    import half\nexcept ValueError as e:\n    print('raised', e)\n"
            "import half\nprint(type(half.__spec__).__name__)\n")
    r = run_python(code, cwd=str(tmp_path), env={"PYTHONPATH": str(tmp_path), "HALF_FAIL": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["body done", "patched late", "ModuleSpec"]
    r = run_python(code, cwd=str(tmp_path), env={"PYTHONPATH": str(tmp_path), "HALF_FAIL": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    # the failed import's patch waits; the retry registers its own too, and both see the whole module
    assert r.stdout.splitlines() == ["raised first try", "body done", "patched late", "patched late",
                                     "ModuleSpec"]


def test_process_group_timeouts():
    import torch.distributed.distributed_c10d as c10d

    assert getattr(c10d._set_pg_timeout, "_neuron", False), "patch process_group_timeouts is not installed"
    assert "only supported for either nccl or gloo" in _source(c10d._set_pg_timeout), \
        "patch process_group_timeouts: _set_pg_timeout changed; it may reach the neuron backend by itself now"


def test_generate_returns_the_cpus_cache_length_patch():
    import transformers.generation.utils as gen

    assert getattr(gen.GenerationMixin.generate, "_neuron", False), "patch generate_static_cache_programs: " \
        "generate is not wrapped (the cache it returns would keep the rounded length)"



def test_set_pg_timeout_warning_names_the_callers_line():
    """A group neither neuron's nor one PyTorch can retime (TorchTitan makes a "fake" one) keeps
    PyTorch's warning, naming the line that called _set_pg_timeout as it does without us."""
    code = ("import datetime, warnings, torch, torch.distributed as dist\n"
            "from torch.testing._internal.distributed.fake_pg import FakeStore\n"
            "dist.init_process_group('fake', store=FakeStore(), rank=0, world_size=2)\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=5))\n"
            "print(repr([(x.filename, x.lineno, str(x.message)) for x in w]))\n")
    seen = {}
    for autoload in ("0", "1"):
        out = run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": autoload})
        assert out.returncode == 0, out.stderr
        seen[autoload] = out.stdout.strip().splitlines()[-1]
    assert seen["1"] == seen["0"], f"with torch_neuronx {seen['1']}, without {seen['0']}"
    assert "('<string>', 6, 'Set timeout is now only supported for either nccl or gloo.')" in seen["1"]
