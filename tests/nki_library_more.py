"""nki-library cases beyond the first set (see nki_library.py): MoE routing, top-k, the token-generation
attention mask and projections. Inputs are built as each kernel's integration test under
test/integration/nkilib builds them (its generator, seed, shapes from its fast list, LNC degree and
tolerance); the CompilerArgs() default of those tests is LNC 2 on Trn2.
"""
from __future__ import annotations

import importlib

import numpy as np
import torch

from nki_library import Case, _load


def _module(path):
    return importlib.import_module("nkilib_src.nkilib." + path)


def _uniform_01(shape, dtype):
    """router_topk's generator: every tensor is drawn from its own generator seeded 0, in [-0.1, 0.1]."""
    gen = torch.Generator().manual_seed(0)
    return torch.empty(shape, dtype=torch.float32).uniform_(-0.1, 0.1, generator=gen).to(dtype)


def _router_topk(T, H, E, k, act, bias, pre_norm, norm_prob, col_tiling, scatter, pe_bias):
    act_fn = getattr(_load("core.utils.common_types.RouterActFnType"), act)
    return {"x": _uniform_01((H, T), torch.bfloat16), "w": _uniform_01((H, E), torch.bfloat16),
            "w_bias": _uniform_01((1, E), torch.bfloat16) if bias else None,
            "router_logits": torch.zeros(T, E, dtype=torch.bfloat16),
            "expert_affinities": torch.zeros(T, E, dtype=torch.bfloat16),
            "expert_index": torch.zeros(T, k, dtype=torch.uint32), "act_fn": act_fn, "k": k,
            "x_hbm_layout": 0, "x_sb_layout": 0, "router_pre_norm": pre_norm, "norm_topk_prob": norm_prob,
            "use_column_tiling": col_tiling, "use_indirect_dma_scatter": scatter,
            "use_PE_broadcast_w_bias": pe_bias}


def _topk(lnc, batch, seqlen, vocab, k, dtype):
    create_topk_config = _load("core.topk.rotational_topk.create_topk_config")
    create_rotational = _load("core.topk.rotational_topk.create_rotational_topk_config")
    prepare = _load("core.topk.rotational_topk.prepare_rotational_constants")
    np.random.seed(42)
    inp = np.random.randn(batch * seqlen, vocab).astype(np.float32)
    import torch_neuronx.nki.language as nl

    nl_dtype = nl.float32 if dtype == torch.float32 else nl.bfloat16
    cfg = create_topk_config(inp_shape=(batch, seqlen, vocab), inp_dtype=nl_dtype, k=k, sorted=True,
                             num_programs=lnc)
    cfg = prepare(create_rotational(inp_shape=inp.shape, topk_config=cfg))
    return {"inp": torch.from_numpy(inp).to(dtype), "config": cfg}


def _topk_post(outs, refs, kwargs):
    """What AWS's test checks: the values as sets (sorted), and the values the indices pick."""
    values, indices = outs
    picked = torch.take_along_dim(kwargs["inp"].double(), indices.cpu().long(), dim=-1)
    ref = refs[0].sort(-1).values
    return [values.cpu().double().sort(-1).values, picked.sort(-1).values], [ref, ref]


def _sparse(T, E, top_k, dtype):
    np.random.seed(42)
    K = T * top_k // E
    flat = np.random.permutation(np.concatenate([np.ones(K * E), np.zeros((T - K) * E)]))
    x = flat.reshape(E, T).T.astype(np.float32 if dtype == torch.float32 else np.int32)
    if dtype == torch.float32:
        x[x > 0] = 0.1
    return torch.from_numpy(np.ascontiguousarray(x))


def _gen_mask(batch, q_head, s_ctx, s_active, block_len):
    np.random.seed(42)
    cache_lens = np.random.randint(1, s_ctx, size=(batch,)).astype(np.float32)
    pos = np.repeat(cache_lens, s_active)[None, :]
    return {"pos_ids_hbm": torch.from_numpy(pos), "bs": batch, "q_head": q_head, "s_active": s_active,
            "s_prior": s_ctx, "block_len": block_len}


def _out_proj_tkg(B, n_heads, S, d_head, H, bias, transpose):
    rng = np.random.default_rng(0)
    attention = torch.from_numpy(rng.normal(size=(d_head, B, n_heads, S)).astype(np.float32))
    weight = torch.from_numpy(rng.normal(size=(d_head * n_heads, H)).astype(np.float32))
    qt = _load("core.utils.common_types.QuantizationType").NONE
    b = None
    if bias:
        b = torch.from_numpy((np.random.default_rng(0).normal(size=(1, H)) * 100).astype(np.float32))
    return {"attention": attention.to(torch.bfloat16), "weight": weight.to(torch.bfloat16),
            "bias": None if b is None else b.to(torch.bfloat16), "quantization_type": qt, "weight_scale": None,
            "input_scale": None, "TRANSPOSE_OUT": transpose, "OUT_IN_SB": False}


def _out_proj_cte(batch, seqlen, hidden, n_head, d_head, bias):
    np.random.seed(0)  # np_random_sample(): one seed, then attention and weight drawn in turn, rounded to bf16
    attention = torch.from_numpy(np.random.random_sample((batch, n_head, d_head, seqlen))).to(torch.bfloat16)
    weight = torch.from_numpy(np.random.random_sample((n_head * d_head, hidden))).to(torch.bfloat16)
    b = None
    if bias:
        b = torch.from_numpy((np.random.default_rng(0).normal(size=(1, hidden)) * 100).astype(np.float32))
    return {"attention": attention, "weight": weight, "bias": None if b is None else b.to(torch.bfloat16)}


def _tp_broadcast_kernel(src_hbm, src_offset, broadcast_count, src_select_index):
    """test_tp_broadcast's harness: load, (select), tp_broadcast in SBUF, store."""
    import torch_neuronx.nki.isa as nisa
    import torch_neuronx.nki.language as nl

    tp_broadcast = _load("core.utils.tp_broadcast.tp_broadcast")
    view = _load("core.utils.tensor_view.TensorView")
    src = nl.ndarray(src_hbm.shape, src_hbm.dtype, nl.sbuf)
    out_sb = nl.ndarray((broadcast_count, src_hbm.shape[0]), src_hbm.dtype, nl.sbuf)
    out = nl.ndarray((broadcast_count, src_hbm.shape[0]), src_hbm.dtype, nl.shared_hbm)
    nisa.dma_copy(src, src_hbm)
    tp_broadcast(view(src).select(1, src_select_index) if src_select_index is not None else src, out_sb,
                 src_offset)
    nisa.dma_copy(out, out_sb)
    return out


def _tp_broadcast_ref(src_hbm, src_offset, broadcast_count, src_select_index):
    src = src_hbm.select(1, src_select_index) if src_select_index is not None else src_hbm
    return src.reshape(src.shape[0], -1)[:, src_offset].unsqueeze(0).repeat(broadcast_count, 1)


def _gaussian(rng, shape, dtype):
    """nki-library's gaussian_tensor_generator: one default_rng(seed) drawn tensor after tensor."""
    return torch.from_numpy(rng.normal(size=shape).astype(np.float32)).to(dtype)


def _conv1d(b, cin, cout, length, k, stride, pl, pr, dil, bias, act, lnc_shard, dtype):
    rng = np.random.default_rng(0)
    x, f = _gaussian(rng, (b, cin, length), dtype), _gaussian(rng, (k, cin, cout), dtype)
    return {"x_in": x, "filters": f, "bias": _gaussian(rng, (cout,), dtype) if bias else None, "stride": stride,
            "padding": (pl, pr), "dilation": dil,
            "activation_fn": getattr(_load("core.utils.common_types.ActFnType"), act) if act else None,
            "lnc_shard": lnc_shard}


def _depthwise(b, c, w, k, stride, padding):
    rng = np.random.default_rng(0)
    return {"img_ref": _gaussian(rng, (b, c, 1, w), torch.bfloat16),
            "filter_ref": _gaussian(rng, (c, 1, 1, k), torch.bfloat16), "padding": padding, "stride": stride,
            "rhs_dilation": (1, 1), "lhs_dilation": (1, 1), "feature_group_count": c, "batch_group_count": 1}


def _depthwise_ref(img_ref, filter_ref, padding, stride, **_):
    """test_depthwise_conv1d's golden: torch's grouped conv2d (nki-library ships no reference file)."""
    return torch.nn.functional.conv2d(img_ref, filter_ref, stride=stride, padding=(0, padding[1][0]),
                                      groups=img_ref.shape[1])


def _qkv_tkg(b, s, h, h_actual, i, nq, nkv, dh, norm, fused_add, norm_bias, qkv_bias, eps, layout):
    """test_qkv_common.build_qkv_input's draws (one gaussian generator, tensor after tensor), bf16."""
    types = _module("core.utils.common_types")
    rng, bf = np.random.default_rng(0), torch.bfloat16
    d = {"hidden": _gaussian(rng, (b, s, h), bf), "qkv_w": _gaussian(rng, (h, i), bf)}
    d["mlp_prev"] = _gaussian(rng, (b, s, h), bf) if fused_add else None
    d["attn_prev"] = _gaussian(rng, (b, s, h), bf) if fused_add else None
    d["norm_w"] = _gaussian(rng, (1, h), bf) if norm in ("RMS_NORM", "LAYER_NORM") else None
    d["qkv_bias"] = _gaussian(rng, (1, i), bf) if qkv_bias else None
    d["norm_bias"] = _gaussian(rng, (1, h), bf) if norm_bias else None
    d.update(fused_add=fused_add, d_head=dh, num_kv_heads=nkv, num_q_heads=nq, eps=eps, hidden_actual=h_actual,
             output_layout=getattr(types.QKVOutputLayout, layout), norm_type=getattr(types.NormType, norm))
    return d


def _mlp(b, s, h, i, norm, fused_add, store_add, gate_bias, up_bias, down_bias, norm_bias, col_gu, col_down):
    """test_mlp_common.build_fused_norm_mlp's draws (gaussian, seed 0; gamma uniform +-0.1 from
    default_rng(42)), bf16, SiLU, no quantization."""
    types = _module("core.utils.common_types")
    rng, bf = np.random.default_rng(0), torch.bfloat16
    d = {"fused_add_tensor": _gaussian(rng, (b, s, h), bf) if fused_add else None,
         "hidden_tensor": _gaussian(rng, (b, s, h), bf)}
    gamma = torch.from_numpy(np.random.default_rng(42).uniform(-0.1, 0.1, (1, h)).astype(np.float32)).to(bf)
    d["normalization_weights_tensor"] = gamma if norm != "NO_NORM" else None
    d["normalization_bias_tensor"] = _gaussian(rng, (1, h), bf) if norm != "NO_NORM" and norm_bias else None
    d.update(gate_proj_weights_tensor=_gaussian(rng, (h, i), bf), up_proj_weights_tensor=_gaussian(rng, (h, i), bf),
             down_proj_weights_tensor=_gaussian(rng, (i, h), bf))
    d.update(gate_proj_bias_tensor=_gaussian(rng, (1, i), bf) if gate_bias else None,
             up_proj_bias_tensor=_gaussian(rng, (1, i), bf) if up_bias else None,
             down_proj_bias_tensor=_gaussian(rng, (1, h), bf) if down_bias else None)
    d.update(store_fused_add_result=store_add, activation_fn=types.ActFnType.SiLU,
             normalization_type=getattr(types.NormType, norm), quantization_type=types.QuantizationType.NONE,
             output_dtype=_nl().bfloat16, eps=1e-6, use_tkg_gate_up_proj_column_tiling=col_gu,
             use_tkg_down_proj_column_tiling=col_down)
    return d


def _mlp_kernel(**kwargs):
    """What core/mlp/mlp.py's dispatcher does before it calls mlp_tkg or mlp_cte (that file does not
    parse at the 2026-04-13 checkout: a docstring's tail is repeated, IndentationError at line 203)."""
    nl = _nl()
    mp = _module("core.mlp.mlp_parameters")
    params = mp.MLPParameters(**kwargs)
    mp.validate_mlp_arguments(params)
    shape = (params.batch_size, params.sequence_len, params.hidden_size)
    out = nl.ndarray(shape, dtype=params.output_dtype, buffer=nl.shared_hbm)
    add_out = nl.ndarray(shape, dtype=params.output_dtype, buffer=nl.shared_hbm) \
        if mp.mlpp_store_fused_add(params) else None
    if mp.is_mlp_tkg(params):
        _load("core.mlp.mlp_tkg.mlp_tkg.mlp_tkg")(params, out, add_out)
    else:
        _load("core.mlp.mlp_cte.mlp_cte.mlp_cte")(params, out, add_out)
    return [out] if add_out is None else [out, add_out]


def _nl():
    import torch_neuronx.nki.language as nl

    return nl


def _mlp_ref(hidden_tensor, gate_proj_weights_tensor, up_proj_weights_tensor, down_proj_weights_tensor,
             normalization_weights_tensor, normalization_bias_tensor, fused_add_tensor, store_fused_add_result,
             normalization_type, gate_proj_bias_tensor, up_proj_bias_tensor, down_proj_bias_tensor, eps, **_):
    """test_mlp_common.norm_mlp_ref in torch (nki-library ships no mlp reference file): the residual
    sum, nki-library's torch norm, SiLU(x @ gate + b) * (x @ up + b) @ down + b."""
    x = hidden_tensor if fused_add_tensor is None else hidden_tensor + fused_add_tensor
    if normalization_type.name == "RMS_NORM":
        y = _load("core.subkernels.rmsnorm_torch.rms_norm_torch_ref")(x, normalization_weights_tensor, eps=eps)
    elif normalization_type.name == "LAYER_NORM":
        y = _load("core.subkernels.layernorm_torch.layer_norm_torch_ref")(
            x, normalization_weights_tensor, normalization_bias_tensor, eps=eps)
    else:
        y = x
    y = y.double()  # nki-library's torch norms compute and return fp32
    gate, up = y @ gate_proj_weights_tensor, y @ up_proj_weights_tensor
    gate = gate if gate_proj_bias_tensor is None else gate + gate_proj_bias_tensor
    up = up if up_proj_bias_tensor is None else up + up_proj_bias_tensor
    out = (torch.nn.functional.silu(gate) * up) @ down_proj_weights_tensor
    out = out if down_proj_bias_tensor is None else out + down_proj_bias_tensor
    return [out, x] if fused_add_tensor is not None and store_fused_add_result else [out]


def _rmsnorm_quant(lnc, b, s, h, quant_only, quant, lower_bound):
    """test_rmsnorm_quant's inputs: gaussian (seed 0) bf16 hidden and gamma ([1, H] under LNC 2); the
    static scale a (128, 1) fill drawn from its own default_rng(0) as normal(0.5, 0.1)."""
    types = _module("core.utils.common_types")
    rng = np.random.default_rng(0)
    hidden = _gaussian(rng, (b, s, h), torch.bfloat16)
    gamma = _gaussian(rng, (1, h) if lnc > 1 else (h,), torch.bfloat16)
    scale = None
    if quant == "STATIC":
        scale = torch.full((128, 1), float(np.random.default_rng(0).normal(loc=0.5, scale=0.1)))
    kargs = _load("core.rmsnorm.rmsnorm_quant.RmsNormQuantKernelArgs")(
        quantization_type=getattr(types.QuantizationType, quant), lower_bound=lower_bound,
        norm_type=types.NormType.NO_NORM if quant_only else types.NormType.RMS_NORM, eps=1e-6)
    return {"hidden": hidden, "ln_w": gamma, "kargs": kargs, "input_dequant_scale": scale}


def _rmsnorm_quant_ref(hidden, ln_w, kargs, input_dequant_scale):
    """test_rmsnorm_quant.rmsnorm_quant_ref in torch (nki-library ships no reference file): rms norm
    (eps added to the rms), then fp8 (±240) row quantization with its fp32 dequant scale, or static."""
    x = hidden
    if kargs.norm_type.name != "NO_NORM":
        x = x / (x.square().mean(-1, keepdim=True).sqrt() + kargs.eps) * ln_w.reshape(-1)
    if kargs.quantization_type.name == "ROW":
        absmax = x.abs().amax(-1, keepdim=True)
        if kargs.lower_bound > 0:
            absmax = absmax.clamp(max=kargs.lower_bound)
            x = x.clamp(-kargs.lower_bound, kargs.lower_bound)
        dequant = absmax / 240.0
        return [x / dequant, dequant]
    return [(x / input_dequant_scale[0, 0]).clamp(-240.0, 240.0)]


def _rmsnorm_quant_post(outs, refs, kwargs):
    """The ROW output packs each row's fp32 dequant scale into its last 4 fp8 bytes."""
    out = outs[0].cpu()
    h = kwargs["hidden"].shape[-1]
    if out.shape[-1] == h:
        return [out.double()], refs
    return [out[..., :h].double(), out[..., h:].contiguous().view(torch.float32).double()], refs


def _qkv_cte(b, s, h, h_actual, i, norm, fused_add, eps):
    """test_qkv_cte's inputs (build_qkv_input, as _qkv_tkg draws them) under qkv_cte's names."""
    d = _qkv_tkg(b, s, h, h_actual, i, None, None, None, norm, fused_add, False, False, eps, "BSD")
    return {"input": d["hidden"], "fused_qkv_weights": d["qkv_w"], "output_layout": d["output_layout"],
            "bias": None, "fused_residual_add": fused_add, "mlp_prev": d["mlp_prev"], "attention_prev": d["attn_prev"],
            "fused_norm_type": d["norm_type"], "gamma_norm_weights": d["norm_w"], "layer_norm_bias": None,
            "norm_eps": eps, "hidden_actual": h_actual}


def _qkv_cte_ref(input, fused_qkv_weights, output_layout, bias, fused_residual_add, mlp_prev, attention_prev,
                 fused_norm_type, gamma_norm_weights, layer_norm_bias, norm_eps, hidden_actual):
    """qkv_tkg's torch reference computes what qkv_cte does (norm, projection); qkv_cte returns the
    projection only (nki-library ships no qkv_cte reference file)."""
    out = _load("core.qkv.qkv_tkg_torch.qkv_tkg_torch_ref")(
        hidden=input, qkv_w=fused_qkv_weights, norm_w=gamma_norm_weights, fused_add=fused_residual_add,
        mlp_prev=mlp_prev, attn_prev=attention_prev, output_layout=output_layout, eps=norm_eps,
        norm_type=fused_norm_type, qkv_bias=bias, norm_bias=layer_norm_bias, hidden_actual=hidden_actual)
    return [out["out"]]


def _attention_tkg_kernel(q, k_active, v_active, k_prior, v_prior, mask, inv_freqs, rope_pos_ids, cfg,
                          attn_out_shape, k_out_shape):
    """test_attention_tkg's attn_tkg_wrapper for HBM inputs and outputs with RoPE fused: an SBUF
    manager over the SBUF less 16 KiB, the two HBM outputs, the kernel."""
    nl = _nl()
    sbm = _load("core.utils.allocator.SbufManager")(0, nl.tile_size.total_available_sbuf_size - 16 * 1024,
                                                    _load("core.utils.logging.Logger")("SBM"))
    sbm.open_scope()
    out = nl.ndarray(attn_out_shape, dtype=q.dtype, buffer=nl.shared_hbm)
    k_out = nl.ndarray(k_out_shape, dtype=q.dtype, buffer=nl.shared_hbm) if cfg.fuse_rope else None
    attn_out, k_out = _load("core.attention.attention_tkg.attention_tkg")(
        q, k_active, v_active, k_prior, v_prior, mask, out, cfg, sbm, inv_freqs, rope_pos_ids, None, None, None,
        k_out)
    sbm.close_scope()
    return (attn_out, k_out) if cfg.fuse_rope else (attn_out,)


def _attention_tkg(bs, q_head, s_active, curr, full, d):
    """test_attention_tkg's inputs for a flat KV cache, K prior transposed, positions and RoPE fused:
    np_random_sample (seed 0) in turn for q, k/v active, k/v prior (bf16); a causal active mask."""
    cfg = _load("core.attention.attention_tkg_utils.AttnTKGConfig")(
        bs, q_head, s_active, curr, full, d, 0, tp_k_prior=True, use_pos_id=True, fuse_rope=True)
    pos_id = ((np.arange(bs) * 3 + (curr // 4 * 3)) % (curr - s_active))[:, None]
    np.random.seed(0)

    def draw(*shape):
        return torch.from_numpy(np.random.random_sample(shape)).to(torch.bfloat16)

    q, k_active = draw(bs, q_head, s_active, d), draw(bs, 1, s_active, d)
    v_active, k_prior, v_prior = draw(bs, 1, s_active, d), draw(bs, 1, full, d), draw(bs, 1, full, d)
    mask = torch.tril(torch.ones(s_active, s_active)).expand(bs, q_head, -1, -1).permute(3, 0, 1, 2)
    inv_freqs = torch.from_numpy(np.random.random(size=(d // 2, 1)).astype(np.float32))
    return {"q": q, "k_active": k_active, "v_active": v_active, "k_prior": k_prior, "v_prior": v_prior,
            "mask": mask.to(torch.uint8).contiguous(), "inv_freqs": inv_freqs,
            "rope_pos_ids": torch.from_numpy(np.broadcast_to(pos_id, (bs, s_active)).astype(np.float32).copy()),
            "cfg": cfg, "attn_out_shape": (bs, q_head, d, s_active), "k_out_shape": (bs, 1, d, s_active)}


def _attention_tkg_ref(lnc):
    def ref(q, k_active, v_active, k_prior, v_prior, mask, inv_freqs, rope_pos_ids, cfg, attn_out_shape,
            k_out_shape):
        out, k_out = _load("core.attention.attention_tkg_torch.attention_tkg_torch_ref", lnc)(
            q=q, k_active=k_active, v_active=v_active, k_prior=k_prior, v_prior=v_prior, mask=mask,
            out=torch.zeros(attn_out_shape, dtype=torch.float32), cfg=cfg, sbm=None, inv_freqs=inv_freqs,
            rope_pos_ids=rope_pos_ids, start_pos_ids=None, sink=None, active_blocks_table=None,
            k_out=torch.zeros(k_out_shape, dtype=torch.float32), DBG_TENSORS=None)
        return [out, k_out]
    return ref


def more_cases() -> list[Case]:
    cases = []
    # router_topk: test_router_topk's base configs, x in HBM as [H, T]; shard_on_tokens needs sendrecv
    for T, H, E, k, act, bias, pre, normp, col, scat, pe in [
            (4, 3072, 128, 4, "SOFTMAX", True, False, False, False, False, False),
            (4, 3072, 128, 4, "SOFTMAX", True, False, False, False, False, True),
            (16, 3072, 128, 4, "SOFTMAX", True, False, False, True, False, False),
            (8, 8192, 128, 8, "SIGMOID", True, True, True, False, True, False),
            (32, 3072, 128, 4, "SOFTMAX", True, True, True, False, False, False),
            (2, 5120, 16, 1, "SOFTMAX", False, False, False, False, False, False)]:
        flags = "".join(f" {n}" for n, on in [("prenorm", pre), ("normprob", normp), ("coltile", col),
                                               ("scatter", scat), ("pebias", pe), ("bias", bias)] if on)
        cases.append(Case(f"router_topk lnc2 T{T} H{H} E{E} k{k} {act.lower()}{flags} bf16",
                          "core.router_topk.router_topk.router_topk",
                          "core.router_topk.router_topk_torch.router_topk_torch_ref",
                          lambda a=(T, H, E, k, act, bias, pre, normp, col, scat, pe): _router_topk(*a),
                          2, 2e-2, 1e-5))
    for lnc, b, s, v, k, dtype in [(2, 1, 1, 3168, 8, torch.float32), (1, 4, 5, 8192, 256, torch.float32),
                                   (2, 1, 1, 3168, 256, torch.bfloat16)]:
        cases.append(Case(f"rotational_topk lnc{lnc} b{b} s{s} v{v} k{k} {str(dtype)[6:]}",
                          "core.topk.rotational_topk.rotational_topk", "core.topk.torch_ref.topk_torch_ref",
                          lambda a=(lnc, b, s, v, k, dtype): _topk(*a), lnc, 1e-3, 1e-5, post=_topk_post))
    for T, E, top_k, chunk, dtype in [(4096, 128, 8, 4096, torch.int32), (4096, 128, 8, 4096, torch.float32)]:
        cases.append(Case(f"find_nonzero_indices lnc2 T{T} E{E} top{top_k} {str(dtype)[6:]}",
                          "core.subkernels.find_nonzero_indices.find_nonzero_indices",
                          "core.subkernels.find_nonzero_indices_torch.find_nonzero_indices_torch_ref",
                          lambda a=(T, E, top_k, dtype), c=chunk: {"input_tensor": _sparse(*a), "chunk_size": c},
                          2, 0.0, 0.0))
    for b, qh, s_ctx, s_active, block_len, lnc in [(4, 1, 256, 1, 0, 1), (4, 2, 2048, 7, 0, 1),
                                                   (4, 1, 4096, 5, 0, 2), (8, 8, 4096, 5, 0, 2),
                                                   (4, 1, 256, 5, 16, 1)]:
        cases.append(Case(f"gen_mask_tkg_hbm lnc{lnc} b{b} qh{qh} ctx{s_ctx} act{s_active} block{block_len} fp32",
                          "core.attention.gen_mask_tkg.gen_mask_tkg_hbm",
                          "core.attention.gen_mask_tkg_torch.gen_mask_tkg_hbm_torch_ref",
                          lambda a=(b, qh, s_ctx, s_active, block_len): _gen_mask(*a), lnc, 0.0, 0.0))
    for B, nh, S, dh, H, bias, tp in [(4, 8, 4, 32, 3072, True, True), (4, 8, 4, 64, 3072, False, False),
                                      (4, 8, 4, 64, 5378, False, False), (4, 2, 4, 64, 7168, False, True),
                                      (4, 10, 8, 128, 602, True, False)]:
        cases.append(Case(f"output_projection_tkg lnc2 B{B} nh{nh} S{S} dh{dh} H{H} bias={bias} tp={tp} bf16",
                          "core.output_projection.output_projection_tkg.output_projection_tkg",
                          "core.output_projection.output_projection_tkg_torch.output_projection_tkg_torch_ref",
                          lambda a=(B, nh, S, dh, H, bias, tp): _out_proj_tkg(*a), 2, 2e-2, 1e-5))
    for b, s, h, nh, dh, bias in [(1, 16, 5120, 10, 128, True), (1, 128, 3072, 16, 64, True),
                                  (1, 128, 3072, 17, 10, True), (1, 128, 8192, 1, 128, False)]:
        cases.append(Case(f"output_projection_cte lnc2 b{b} s{s} h{h} nh{nh} dh{dh} bias={bias} bf16",
                          "core.output_projection.output_projection_cte.output_projection_cte",
                          "core.output_projection.output_projection_cte.output_projection_cte_torch."
                          "output_projection_cte_torch_ref",
                          lambda a=(b, s, h, nh, dh, bias): _out_proj_cte(*a), 2, 2e-2, 1e-5))
    for shape, offset, count, sel in [((5, 7), 0, 1, None), ((3, 8, 11), 1, 2, 4), ((8, 6), 5, 7, None),
                                      ((13, 3, 13), 9, 12, 2)]:
        def build(shape=shape, offset=offset, count=count, sel=sel):
            np.random.seed(0)  # np_random_sample()
            src = torch.from_numpy(np.random.random_sample(shape).astype(np.float32))
            return {"src_hbm": src, "src_offset": offset, "broadcast_count": count, "src_select_index": sel}
        cases.append(Case(f"tp_broadcast lnc1 {shape} offset{offset} count{count} select={sel} fp32",
                          _tp_broadcast_kernel, _tp_broadcast_ref, build, 1, 0.0, 0.0))
    for (b, cin, cout, length, k, stride, pl, pr, dil, bias, act, shard, dtype) in [
            (1, 16, 32, 20, 3, 1, 0, 0, 1, False, None, False, torch.float32),
            (2, 64, 128, 40, 5, 2, 2, 2, 2, True, "GELU", False, torch.float32),
            (1, 48, 64, 128, 100, 1, 1, 1, 1, True, None, False, torch.float32),
            (1, 128, 256, 200, 5, 2, 2, 2, 1, True, "GELU", True, torch.float32),
            (1, 16, 32, 20, 3, 1, 0, 0, 1, True, "SiLU", False, torch.bfloat16)]:
        tol = 5e-2 if dtype == torch.bfloat16 else 1e-5
        cases.append(Case(f"conv1d lnc2 b{b} cin{cin} cout{cout} L{length} k{k} s{stride} pad{pl},{pr} d{dil} "
                          f"bias={bias} {act} shard={shard} {str(dtype)[6:]}",
                          "experimental.conv.conv1d.conv1d", "experimental.conv.conv1d_torch.conv1d_torch_ref",
                          lambda a=(b, cin, cout, length, k, stride, pl, pr, dil, bias, act, shard, dtype):
                          _conv1d(*a), 2, tol, tol, ref_dtype=torch.float32))
    for b, c, w, k, stride, padding in [(1, 16, 512, 64, (1, 1), ((0, 0), (0, 0))),
                                        (1, 256, 512, 64, (1, 2), ((0, 0), (5, 5))),
                                        (1, 512, 5000, 8, (1, 1), ((0, 0), (0, 0)))]:
        cases.append(Case(f"depthwise_conv1d lnc2 b{b} c{c} w{w} k{k} stride{stride[1]} pad{padding[1][0]} bf16",
                          "experimental.conv.depthwise_conv1d.depthwise_conv1d_implicit_gemm", _depthwise_ref,
                          lambda a=(b, c, w, k, stride, padding): _depthwise(*a), 2, 1e-2, 1e-2))
    # qkv_tkg: test_qkv_tkg_accuracy_unit's non-quantized rows (it calls the qkv dispatcher, which
    # takes this kernel for token generation)
    for lnc, b, s, h, ha, i, nq, nkv, dh, norm, fadd, nb, qb, eps, layout in [
            (1, 1, 4, 16384, None, 384, 1, 1, 128, "RMS_NORM", True, False, False, 1e-6, "BSD"),
            (1, 4, 1, 4096, 3072, 896, 5, 1, 128, "RMS_NORM", True, False, False, 1e-6, "BSD"),
            (1, 1, 1, 128, None, 512, 2, 1, 128, "NO_NORM", False, False, False, 1e-6, "BSD"),
            (1, 1, 5, 8192, None, 384, 1, 1, 128, "LAYER_NORM", False, True, False, 1e-6, "BSD"),
            (2, 8, 5, 3072, None, 640, 8, 1, 64, "RMS_NORM", False, False, True, 1e-6, "BSD"),
            (2, 1, 1, 8192, None, 768, 2, 2, 128, "NO_NORM", False, False, False, 1e-6, "NBSd"),
            (2, 1, 1, 8192, None, 512, 2, 1, 128, "RMS_NORM", True, False, False, 77.0, "BSD")]:
        cases.append(Case(f"qkv_tkg lnc{lnc} b{b} s{s} h{h}{f'/{ha}' if ha else ''} i{i} q{nq} kv{nkv} d{dh} "
                          f"{norm.lower()} add={fadd} nbias={nb} qbias={qb} eps={eps} {layout} bf16",
                          "core.qkv.qkv_tkg.qkv_tkg", "core.qkv.qkv_tkg_torch.qkv_tkg_torch_ref",
                          lambda a=(b, s, h, ha, i, nq, nkv, dh, norm, fadd, nb, qb, eps, layout): _qkv_tkg(*a),
                          lnc, 2e-2, 1e-5))
    # indexed_flatten: test_indexed_flatten_fast's rows (LNC 2; the two programs' halves meet by sendrecv)
    for T, E, f_len in [(4096, 2, 128), (10240, 17, 128)]:
        def build(T=T, E=E, f_len=f_len):
            out_len = -(-(E * T + 1024) // 128) * 128
            return {"input_tensor": torch.arange(E * T, dtype=torch.int32).reshape(E, T), "f_len": f_len,
                    "output_len": out_len, "row_offsets": torch.tensor([T // f_len * e for e in range(E)],
                                                                       dtype=torch.int32),
                    "row_offsets_start": None, "padding_val": -1}
        cases.append(Case(f"indexed_flatten lnc2 T{T} E{E} f{f_len} int32",
                          "core.subkernels.indexed_flatten.indexed_flatten",
                          "core.subkernels.indexed_flatten_torch.indexed_flatten_torch_ref", build, 2, 0.0, 0.0))
    # qkv_cte: test_qkv_cte_accuracy_unit's rows (LNC 1, bf16)
    for b, s_len, h, ha, i, norm, fadd, eps in [(1, 128, 512, None, 512, "RMS_NORM", True, 1e-6),
                                                (1, 127, 512, None, 512, "RMS_NORM", True, 1e-6),
                                                (1, 512, 1024, 768, 256, "RMS_NORM", True, 1e-6),
                                                (1, 512, 1024, None, 512, "NO_NORM", False, 1e-6),
                                                (1, 512, 1024, None, 512, "RMS_NORM", True, 77.0)]:
        cases.append(Case(f"qkv_cte lnc1 b{b} s{s_len} h{h}{f'/{ha}' if ha else ''} i{i} {norm.lower()} add={fadd} "
                          f"eps={eps} bf16", "core.qkv.qkv_cte.qkv_cte", _qkv_cte_ref,
                          lambda a=(b, s_len, h, ha, i, norm, fadd, eps): _qkv_cte(*a), 1, 2e-2, 1e-5))
    # attention_tkg: test_attn_tkg_fast's smallest row (RoPE fused, positions, K prior transposed), LNC 1 and 2
    for lnc in (1, 2):
        cases.append(Case(f"attention_tkg lnc{lnc} b4 qh2 act7 prior256/16384 d128 rope bf16", _attention_tkg_kernel,
                          _attention_tkg_ref(lnc), lambda: _attention_tkg(4, 2, 7, 256, 16384, 128), lnc, 1e-2, 1e-5))
    # rmsnorm_quant: test_rmsnorm_quant_lnc_unit's rows (bf16 in, fp8 e4m3 out; its validator's rtol
    # 0.072 for the values, 0.007 for the row scales)
    for s_len, quant_only, quant, lb in [(2, True, "ROW", 0.0), (2, False, "ROW", 0.5), (160, False, "ROW", 0.0),
                                          (2, False, "STATIC", 0.0), (160, True, "STATIC", 0.0)]:
        cases.append(Case(f"rmsnorm_quant lnc2 b1 s{s_len} h16384 quant_only={quant_only} {quant.lower()} lb{lb} bf16",
                          "core.rmsnorm.rmsnorm_quant.rmsnorm_quant_kernel", _rmsnorm_quant_ref,
                          lambda a=(2, 1, s_len, 16384, quant_only, quant, lb): _rmsnorm_quant(*a), 2,
                          [0.072, 0.007], 0.0, post=_rmsnorm_quant_post))
    # mlp (token generation): test_mlp_tkg's LNC 2 and LNC 1 rows without quantization
    for lnc, b, s, h, i, norm, fadd, sadd, gb, ub, db, nb, col_gu, col_down in [
            (2, 4, 2, 4096, 1024, "LAYER_NORM", False, False, False, False, False, False, True, True),
            (2, 1, 1, 8192, 448, "RMS_NORM", False, False, False, False, False, False, True, True),
            (2, 4, 5, 8192, 896, "RMS_NORM", True, True, False, False, False, False, True, True),
            (2, 8, 5, 8192, 512, "RMS_NORM", False, False, True, True, True, False, True, True),
            (1, 1, 1, 256, 448, "NO_NORM", False, False, False, False, False, False, True, True),
            (2, 4, 1, 5120, 256, "NO_NORM", False, False, False, False, False, False, False, False)]:
        cases.append(Case(f"mlp_tkg lnc{lnc} b{b} s{s} h{h} i{i} {norm.lower()} add={fadd}/{sadd} "
                          f"bias={gb}{ub}{db} coltile={col_gu}{col_down} bf16", _mlp_kernel, _mlp_ref,
                          lambda a=(b, s, h, i, norm, fadd, sadd, gb, ub, db, nb, col_gu, col_down): _mlp(*a),
                          lnc, 2e-2, 1e-5))
    return cases
