// The collectives of ProcessGroupNeuron: checks at the call, then the task's body on one host
// (ranks read and write each other's device memory in place, each doing its share) and over the
// host backend (tensors staged through host memory for gloo). The software NeuronCore's memory
// is host addressable, so both are plain copies and loops; a hardware runtime would DMA here.
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstring>

#include "core/device.h"
#include "distributed/hybrid_collectives.h"
#include "distributed/process_group.h"
#include "distributed/reduce.h"
#include "distributed/shm_collectives.h"
#include "exec/tensor_desc.h"
#include "neuronrt/shm_group.h"

namespace torch_neuronx {
namespace {

using neuronrt::ShmGroup;
using Tensors = std::vector<at::Tensor>;
using Descs = std::vector<TensorDesc>;

// What a host body holds of its tensors (never the tensors: see process_group.h), and the CPU
// views over the same memory it makes of them on the worker.
Descs descs(const Tensors& ts) {
  Descs out;
  for (const auto& t : ts) out.push_back(TensorDesc::of(t));
  return out;
}
Tensors views(const Descs& ds) {
  Tensors out;
  for (const auto& d : ds) out.push_back(d.view());
  return out;
}

std::string signature(const char* what, const at::Tensor& t, const std::string& extra = "") {
  return std::string(what) + " " + c10::toString(t.scalar_type()) + "[" + std::to_string(t.numel()) + "]" +
         (extra.empty() ? "" : " " + extra);
}

// Collectives move bytes: a tensor must be one dense block. In-place element-wise collectives
// (allreduce, broadcast, reduce) take any dense layout; the rest need row-major order.
void check_layout(const at::Tensor& t, const char* what, bool any_dense = false) {
  TORCH_CHECK(t.is_contiguous() || (any_dense && t.is_non_overlapping_and_dense()), "neuron: ", what,
              ": tensors must be contiguous, got sizes ", t.sizes(), " strides ", t.strides(), " (call .contiguous())");
  TORCH_CHECK(!t.is_sparse(), "neuron: ", what, ": sparse tensors are not supported");
}

void check_same(const at::Tensor& a, const at::Tensor& b, int64_t numel_ratio, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "neuron: ", what, ": output dtype ", a.scalar_type(),
              " differs from input dtype ", b.scalar_type());
  TORCH_CHECK(a.numel() == b.numel() * numel_ratio, "neuron: ", what, ": output has ", a.numel(),
              " elements, expected ", b.numel() * numel_ratio, " (", numel_ratio, " x the input's ", b.numel(), ")");
}

// The list only the root passes (gather's outputs, scatter's inputs): size tensors like `like`
// on the root, nothing elsewhere.
Tensors root_list(const std::vector<Tensors>& lists, bool is_root, int size, const at::Tensor& like, const char* what,
                  const char* role) {
  if (!is_root) {
    TORCH_CHECK(lists.empty() || lists[0].empty(), "neuron: ", what, ": only the root rank takes ", role);
    return {};
  }
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size, "neuron: ", what, ": the root needs ",
              size, " ", role, " tensors");
  for (const auto& t : lists[0]) {
    check_layout(t, what);
    check_same(t, like, 1, what);
  }
  return lists[0];
}

int check_rank(int64_t r, int size, const char* what, const char* role) {
  TORCH_CHECK(r >= 0 && r < size, "neuron: ", what, ": ", role, " rank ", r, " is not in this group of ", size);
  return static_cast<int>(r);
}

// ---- host backend (groups spanning hosts) ----

at::Tensor to_host(const at::Tensor& t) {
  at::Tensor c = at::empty({t.numel()}, t.options().device(c10::kCPU));
  std::memcpy(c.data_ptr(), t.data_ptr(), nbytes(t));
  return c;
}

void from_host(const at::Tensor& t, const at::Tensor& c) { std::memcpy(t.data_ptr(), c.data_ptr(), nbytes(t)); }

void host_pre(at::Tensor& c, const Reduction& r) {
  if (r.op == c10d::ReduceOp::PREMUL_SUM) c.mul_(r.premul);
}
void host_post(at::Tensor& c, const Reduction& r) {
  if (r.op == c10d::ReduceOp::AVG) c.div_(r.ranks);
}

// allreduce (root < 0) or reduce of one tensor over the host backend; `keep`: this rank takes the
// result.
void host_reduce(c10d::Backend& h, const at::Tensor& t, const Reduction& r, int root, bool keep) {
  Tensors c{to_host(t)};
  host_pre(c[0], r);
  if (root < 0) {
    c10d::AllreduceOptions o;
    o.reduceOp = gloo_op(r);
    h.allreduce(c, o)->wait();
  } else {
    c10d::ReduceOptions o;
    o.reduceOp = gloo_op(r);
    o.rootRank = root;
    h.reduce(c, o)->wait();
  }
  host_post(c[0], r);
  if (keep) from_host(t, c[0]);
}

// reduce_scatter over the host backend: `ins` are this rank's pieces, already on the host.
void host_reduce_scatter(c10d::Backend& h, Tensors ins, const at::Tensor& out, const Reduction& r) {
  for (auto& t : ins) host_pre(t, r);
  std::vector<Tensors> c{std::move(ins)};
  Tensors co{to_host(out)};
  c10d::ReduceScatterOptions o;
  o.reduceOp = gloo_op(r);
  h.reduce_scatter(co, c, o)->wait();
  host_post(co[0], r);
  from_host(out, co[0]);
}

Tensors host_all(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(to_host(t));
  return out;
}

void from_host_all(const Tensors& ts, const Tensors& cs) {
  for (size_t i = 0; i < ts.size(); ++i) from_host(ts[i], cs[i]);
}

Tensors flat_chunks(const at::Tensor& t, int n) { return t.view({-1}).chunk(n); }

Tensors concat(Tensors a, const Tensors& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// all_gather's body in a group spanning hosts (hybrid_collectives.h).
ProcessGroupNeuron::HostBody gather_between_hosts(const std::shared_ptr<ShmGroup>& g,
                                                  const ProcessGroupNeuron::Hosts& hosts, const char* what,
                                                  const Piece& in, const std::vector<Piece>& outs,
                                                  const std::string& sig) {
  return [g, leaders = hosts.leaders, layout = hosts.layout, in, outs, sig, what](c10d::Backend&) {
    hybrid_allgather(*g, leaders.get(), layout, in, outs, sig, what);
  };
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_each(const char* name, c10d::OpType type,
                                                               const Tensors& tensors, const c10d::ReduceOp& op,
                                                               int root) {
  const char* what = root < 0 ? "allreduce" : "reduce";
  std::vector<Reduction> rs;
  std::vector<std::string> sigs;
  std::vector<int64_t> numels;
  std::vector<c10::ScalarType> dtypes;
  for (const auto& t : tensors) {
    check_layout(t, what, true);
    rs.push_back(make_reduction(op, t.scalar_type(), size_, what));
    sigs.push_back(signature(what, t, reduction_name(rs.back()) + (root < 0 ? "" : " root " + std::to_string(root))));
    numels.push_back(t.numel());
    dtypes.push_back(t.scalar_type());
  }
  auto shm = [ps = pieces(tensors), numels, dtypes, rs, sigs, what, root](ShmGroup& g) {
    for (size_t i = 0; i < ps.size(); ++i) shm_reduce(g, what, ps[i], numels[i], dtypes[i], rs[i], sigs[i], root);
  };
  HostBody host = [ds = descs(tensors), rs, root, keep = root < 0 || root == rank_](c10d::Backend& h) {
    for (size_t i = 0; i < ds.size(); ++i) host_reduce(h, ds[i].view(), rs[i], root, keep);
  };
  if (hosts_ && root < 0) {
    host = [g = shm_, leaders = hosts_->leaders, ps = pieces(tensors), numels, dtypes, rs, sigs, what](c10d::Backend&) {
      for (size_t i = 0; i < ps.size(); ++i)
        hybrid_allreduce(*g, leaders.get(), ps[i], numels[i], dtypes[i], rs[i], sigs[i], what);
    };
  }
  return enqueue(name, type, tensors, tensors, std::move(shm), std::move(host));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "neuron: allreduce takes one tensor per rank (one device per process), got ",
              tensors.size());
  return reduce_each("neuron::allreduce", c10d::OpType::ALLREDUCE, tensors, opts.reduceOp, -1);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce_coalesced(Tensors& tensors,
                                                                       const c10d::AllreduceCoalescedOptions& opts) {
  return reduce_each("neuron::allreduce_coalesced", c10d::OpType::ALLREDUCE_COALESCED, tensors, opts.reduceOp, -1);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce(Tensors& tensors, const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "neuron: reduce takes one tensor per rank, got ", tensors.size());
  return reduce_each("neuron::reduce", c10d::OpType::REDUCE, tensors, opts.reduceOp,
                     check_rank(opts.rootRank, size_, "reduce", "root"));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "neuron: broadcast takes one tensor per rank, got ", tensors.size());
  const at::Tensor t = tensors[0];
  check_layout(t, "broadcast", true);
  const int root = check_rank(opts.rootRank, size_, "broadcast", "root");
  const std::string sig = signature("broadcast", t, "root " + std::to_string(root));
  return enqueue(
      "neuron::broadcast", c10d::OpType::BROADCAST, {t}, {t},
      [p = piece(t), root, sig](ShmGroup& g) { shm_broadcast(g, {p}, root, sig); },
      [d = TensorDesc::of(t), root](c10d::Backend& h) {
        const at::Tensor v = d.view();
        Tensors c{to_host(v)};
        c10d::BroadcastOptions o;
        o.rootRank = root;
        h.broadcast(c, o)->wait();
        from_host(v, c[0]);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                             const c10d::AllgatherOptions&) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
              "neuron: allgather takes one input and one output list per rank");
  const at::Tensor in = inputs[0];
  const Tensors outs = outputs[0];
  TORCH_CHECK(static_cast<int>(outs.size()) == size_, "neuron: allgather: the output list has ", outs.size(),
              " tensors, the group has ", size_, " ranks");
  check_layout(in, "allgather");
  for (const auto& o : outs) {
    check_layout(o, "allgather");
    check_same(o, in, 1, "allgather");
  }
  const std::string sig = signature("allgather", in);
  HostBody host = [in_d = TensorDesc::of(in), outs_d = descs(outs)](c10d::Backend& h) {
    const Tensors outs = views(outs_d);
    std::vector<Tensors> c{host_all(outs)};
    Tensors ci{to_host(in_d.view())};
    h.allgather(c, ci)->wait();
    from_host_all(outs, c[0]);
  };
  if (hosts_) host = gather_between_hosts(shm_, *hosts_, "allgather", piece(in), pieces(outs), sig);
  return enqueue(
      "neuron::allgather", c10d::OpType::ALLGATHER, concat({in}, outs), outs,
      [i = piece(in), o = pieces(outs), sig](ShmGroup& g) { shm_gather(g, "allgather", i, o, sig); }, std::move(host));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  check_layout(input, "all_gather_into_tensor");
  check_layout(output, "all_gather_into_tensor");
  check_same(output, input, size_, "all_gather_into_tensor");
  const at::Tensor in = input, out = output;
  std::vector<Piece> dst;
  for (int q = 0; q < size_; ++q) dst.push_back(piece(out, q * nbytes(in), nbytes(in)));
  const std::string sig = signature("allgather", in);
  HostBody host = [in_d = TensorDesc::of(in), out_d = TensorDesc::of(out), n = size_](c10d::Backend& h) {
    const at::Tensor out = out_d.view();
    at::Tensor co = to_host(out);
    std::vector<Tensors> c{flat_chunks(co, n)};
    Tensors ci{to_host(in_d.view())};
    h.allgather(c, ci)->wait();
    from_host(out, co);
  };
  if (hosts_) host = gather_between_hosts(shm_, *hosts_, "all_gather_into_tensor", piece(in), dst, sig);
  return enqueue(
      "neuron::all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, {in, out}, {out},
      [i = piece(in), dst, sig](ShmGroup& g) { shm_gather(g, "all_gather_into_tensor", i, dst, sig); },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                                                                   const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "neuron: allgather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  // One task per pair keeps one implementation; the pairs run back to back on the group's stream.
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) last = _allgather_base(outputs[i], inputs[i], opts);
  if (!last) return barrier(c10d::BarrierOptions());
  return last;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                          const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "neuron: gather takes one input tensor per rank");
  const int root = check_rank(opts.rootRank, size_, "gather", "root");
  const at::Tensor in = inputs[0];
  check_layout(in, "gather");
  const Tensors outs = root_list(outputs, rank_ == root, size_, in, "gather", "output");
  const std::string sig = signature("gather", in, "root " + std::to_string(root));
  return enqueue(
      "neuron::gather", c10d::OpType::GATHER, concat({in}, outs), outs,
      [i = piece(in), o = pieces(outs), sig](ShmGroup& g) { shm_gather(g, "gather", i, o, sig); },
      [in_d = TensorDesc::of(in), outs_d = descs(outs), root](c10d::Backend& h) {
        const Tensors outs = views(outs_d);
        const at::Tensor in = in_d.view();
        std::vector<Tensors> c;
        if (!outs.empty()) c.push_back(host_all(outs));
        Tensors ci{to_host(in)};
        c10d::GatherOptions o;
        o.rootRank = root;
        h.gather(c, ci, o)->wait();
        if (!outs.empty()) from_host_all(outs, c[0]);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                           const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "neuron: scatter takes one output tensor per rank");
  const int root = check_rank(opts.rootRank, size_, "scatter", "root");
  const at::Tensor out = outputs[0];
  check_layout(out, "scatter");
  const Tensors ins = root_list(inputs, rank_ == root, size_, out, "scatter", "input");
  const std::string sig = signature("scatter", out, "root " + std::to_string(root));
  return enqueue(
      "neuron::scatter", c10d::OpType::SCATTER, concat({out}, ins), {out},
      [i = pieces(ins), o = piece(out), numel = out.numel(), dtype = out.scalar_type(), root, sig](ShmGroup& g) {
        shm_scatter(g, "scatter", i, o, numel, dtype, nullptr, root, sig);
      },
      [ins_d = descs(ins), out_d = TensorDesc::of(out), root](c10d::Backend& h) {
        const Tensors ins = views(ins_d);
        const at::Tensor out = out_d.view();
        std::vector<Tensors> c;
        if (!ins.empty()) c.push_back(host_all(ins));
        Tensors co{to_host(out)};
        c10d::ScatterOptions o;
        o.rootRank = root;
        h.scatter(co, c, o)->wait();
        from_host(out, co[0]);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                                  const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1, "neuron: reduce_scatter takes one output and one input list");
  const at::Tensor out = outputs[0];
  const Tensors ins = inputs[0];
  TORCH_CHECK(static_cast<int>(ins.size()) == size_, "neuron: reduce_scatter: the input list has ", ins.size(),
              " tensors, the group has ", size_, " ranks");
  check_layout(out, "reduce_scatter");
  for (const auto& i : ins) {
    check_layout(i, "reduce_scatter");
    check_same(out, i, 1, "reduce_scatter");
  }
  if (hosts_) {
    // The hierarchical body takes one input buffer: the list joined on the caller's stream, which
    // the collective's task waits for.
    Tensors flat;
    for (const auto& i : ins) flat.push_back(i.view({-1}));
    return reduce_scatter_flat("neuron::reduce_scatter", c10d::OpType::REDUCE_SCATTER, "reduce_scatter", out,
                               at::cat(flat), opts);
  }
  const Reduction r = make_reduction(opts.reduceOp, out.scalar_type(), size_, "reduce_scatter");
  const std::string sig = signature("reduce_scatter", out, reduction_name(r));
  return enqueue(
      "neuron::reduce_scatter", c10d::OpType::REDUCE_SCATTER, concat({out}, ins), {out},
      [i = pieces(ins), o = piece(out), numel = out.numel(), dtype = out.scalar_type(), r, sig](ShmGroup& g) {
        shm_scatter(g, "reduce_scatter", i, o, numel, dtype, &r, -1, sig);
      },
      [ins_d = descs(ins), out_d = TensorDesc::of(out), r](c10d::Backend& h) {
        host_reduce_scatter(h, host_all(views(ins_d)), out_d.view(), r);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                        const c10d::ReduceScatterOptions& opts) {
  check_layout(input, "reduce_scatter_tensor");
  check_layout(output, "reduce_scatter_tensor");
  check_same(input, output, size_, "reduce_scatter_tensor");
  return reduce_scatter_flat("neuron::reduce_scatter_tensor", c10d::OpType::_REDUCE_SCATTER_BASE,
                             "reduce_scatter_tensor", output, input, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter_flat(const char* name, c10d::OpType type,
                                                                       const char* what, const at::Tensor& out,
                                                                       const at::Tensor& in,
                                                                       const c10d::ReduceScatterOptions& opts) {
  std::vector<Piece> src;
  for (int q = 0; q < size_; ++q) src.push_back(piece(in, q * nbytes(out), nbytes(out)));
  const Reduction r = make_reduction(opts.reduceOp, out.scalar_type(), size_, what);
  const std::string sig = signature("reduce_scatter", out, reduction_name(r));
  Tensors tensors{in, out};
  HostBody host = [in_d = TensorDesc::of(in), out_d = TensorDesc::of(out), r, n = size_](c10d::Backend& h) {
    host_reduce_scatter(h, flat_chunks(to_host(in_d.view()), n), out_d.view(), r);
  };
  if (hosts_) {
    // The leader sums its host's inputs into a buffer of its own; the allocator reuses it only
    // after the group's stream has passed this task (enqueue records it there).
    std::vector<Piece> blocks;
    if (hosts_->leaders) {
      const at::Tensor scratch = at::empty_like(in);
      tensors.push_back(scratch);
      for (int q = 0; q < size_; ++q) blocks.push_back(piece(scratch, q * nbytes(out), nbytes(out)));
    }
    host = [g = shm_, leaders = hosts_->leaders, layout = hosts_->layout, i = piece(in), blocks, o = piece(out),
            numel = out.numel(), dtype = out.scalar_type(), r, sig, what](c10d::Backend&) {
      hybrid_reduce_scatter(*g, leaders.get(), layout, i, blocks, o, numel, dtype, r, sig, what);
    };
  }
  return enqueue(
      name, type, tensors, {out},
      [src, o = piece(out), numel = out.numel(), dtype = out.scalar_type(), r, sig, what](ShmGroup& g) {
        shm_scatter(g, what, src, o, numel, dtype, &r, -1, sig);
      },
      std::move(host));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "neuron: reduce_scatter_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) last = _reduce_scatter_base(outputs[i], inputs[i], opts);
  if (!last) return barrier(c10d::BarrierOptions());
  return last;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                 std::vector<int64_t>& output_splits,
                                                                 std::vector<int64_t>& input_splits,
                                                                 const c10d::AllToAllOptions&) {
  check_layout(input, "all_to_all_single");
  check_layout(output, "all_to_all_single");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "neuron: all_to_all_single: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type());
  // Splits count rows of dim 0; none given means equal parts.
  auto offsets = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    const int64_t rows = t.dim() ? t.size(0) : 1;
    const size_t row_bytes = rows ? nbytes(t) / rows : 0;
    std::vector<size_t> bytes(size_);
    if (splits.empty()) {
      TORCH_CHECK(rows % size_ == 0, "neuron: all_to_all_single: ", which, " has ", rows,
                  " rows, not divisible by the group's ", size_, " ranks; pass split sizes");
      std::fill(bytes.begin(), bytes.end(), row_bytes * (rows / size_));
    } else {
      TORCH_CHECK(static_cast<int>(splits.size()) == size_, "neuron: all_to_all_single: ", splits.size(), " ", which,
                  " split sizes for a group of ", size_);
      int64_t sum = 0;
      for (int q = 0; q < size_; ++q) {
        TORCH_CHECK(splits[q] >= 0, "neuron: all_to_all_single: negative ", which, " split size ", splits[q]);
        bytes[q] = row_bytes * splits[q];
        sum += splits[q];
      }
      TORCH_CHECK(sum == rows, "neuron: all_to_all_single: ", which, " split sizes sum to ", sum, ", but dim 0 has ",
                  rows, " rows");
    }
    return bytes;
  };
  const std::vector<size_t> send_bytes = offsets(input, input_splits, "input");
  const std::vector<size_t> recv_bytes = offsets(output, output_splits, "output");
  std::vector<Piece> send, recv;
  for (size_t q = 0, s = 0, r = 0; q < size_t(size_); s += send_bytes[q], r += recv_bytes[q], ++q) {
    send.push_back(piece(input, s, send_bytes[q]));
    recv.push_back(piece(output, r, recv_bytes[q]));
  }
  const at::Tensor in = input, out = output;
  return enqueue(
      "neuron::all_to_all_single", c10d::OpType::ALLTOALL_BASE, {in, out}, {out},
      [send, recv](ShmGroup& g) { shm_alltoall(g, send, recv); },
      [in_d = TensorDesc::of(in), out_d = TensorDesc::of(out), os = output_splits,
       is = input_splits](c10d::Backend& h) mutable {
        const at::Tensor in = in_d.view(), out = out_d.view();
        at::Tensor ci = to_host(in).view(in.sizes()), co = to_host(out).view(out.sizes());
        h.alltoall_base(co, ci, os, is)->wait();
        from_host(out, co);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall(Tensors& outputs, Tensors& inputs,
                                                            const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "neuron: all_to_all takes ", size_, " input and output tensors, got ", inputs.size(), " and ",
              outputs.size());
  for (int q = 0; q < size_; ++q) {
    check_layout(inputs[q], "all_to_all");
    check_layout(outputs[q], "all_to_all");
    TORCH_CHECK(inputs[q].scalar_type() == outputs[q].scalar_type(), "neuron: all_to_all: dtypes differ");
  }
  const Tensors ins = inputs, outs = outputs;
  return enqueue(
      "neuron::all_to_all", c10d::OpType::ALLTOALL, concat(ins, outs), outs,
      [send = pieces(inputs), recv = pieces(outputs)](ShmGroup& g) { shm_alltoall(g, send, recv); },
      [ins_d = descs(ins), outs_d = descs(outs)](c10d::Backend& h) {
        const Tensors ins = views(ins_d), outs = views(outs_d);
        // gloo's list form needs equal sizes: send one flat buffer with split sizes instead.
        std::vector<int64_t> in_splits, out_splits;
        for (const auto& t : ins) in_splits.push_back(t.numel());
        for (const auto& t : outs) out_splits.push_back(t.numel());
        at::Tensor ci = at::cat(host_all(ins)), co = at::cat(host_all(outs));
        std::vector<int64_t> os = out_splits, is = in_splits;  // the backend may take them over
        h.alltoall_base(co, ci, os, is)->wait();
        from_host_all(outs, co.split_with_sizes(out_splits));
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(Tensors& tensors, int dst, int tag) {
  TORCH_CHECK(tensors.size() == 1, "neuron: send takes one tensor");
  check_rank(dst, size_, "send", "destination");
  TORCH_CHECK(dst != rank_, "neuron: send: rank ", rank_, " cannot send to itself");
  const at::Tensor t = tensors[0];
  check_layout(t, "send");
  return enqueue(
      "neuron::send", c10d::OpType::SEND, {t}, {t},
      [p = ptr(t), bytes = nbytes(t), dst](ShmGroup& g) { g.send(dst, p, bytes); },
      [d = TensorDesc::of(t), dst, tag](c10d::Backend& h) {
        Tensors c{to_host(d.view())};
        h.send(c, dst, tag)->wait();
      },
      false, std::nullopt, kSends);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(Tensors& tensors, int src, int tag) {
  TORCH_CHECK(tensors.size() == 1, "neuron: recv takes one tensor");
  check_rank(src, size_, "recv", "source");
  TORCH_CHECK(src != rank_, "neuron: recv: rank ", rank_, " cannot receive from itself");
  const at::Tensor t = tensors[0];
  check_layout(t, "recv");
  return enqueue(
      "neuron::recv", c10d::OpType::RECV, {t}, {t},
      [p = ptr(t), bytes = nbytes(t), src](ShmGroup& g) { g.recv(src, p, bytes); },
      [d = TensorDesc::of(t), src, tag](c10d::Backend& h) {
        const at::Tensor v = d.view();
        Tensors c{to_host(v)};
        h.recv(c, src, tag)->wait();
        from_host(v, c[0]);
      },
      false, std::nullopt, kReceives);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::barrier(const c10d::BarrierOptions& opts) {
  std::optional<c10::Device> device;
  if (opts.device && opts.device->type() == kNeuron) device = *opts.device;
  if (!device && !opts.device_ids.empty())
    device = c10::Device(kNeuron, static_cast<c10::DeviceIndex>(opts.device_ids[0]));
  return enqueue(
      "neuron::barrier", c10d::OpType::BARRIER, {}, {},
      [](ShmGroup& g) {
        g.begin("barrier", "barrier");
        g.arrive();
        g.end();
      },
      [](c10d::Backend& h) { h.barrier(c10d::BarrierOptions())->wait(); }, /*blocking=*/true, device);
}

}  // namespace torch_neuronx
