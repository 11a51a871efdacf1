#include "distributed/hybrid_collectives.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>

namespace torch_neuronx {
namespace {

using neuronrt::ShmGroup;
using Tensors = std::vector<at::Tensor>;

uint8_t* mine(ShmGroup& g, const Piece& p) { return g.peer(g.rank(), p.at); }

uint8_t* bytes_of(const at::Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

// AVG and PREMUL_SUM are applied inside the host; between hosts they are sums.
c10d::ReduceOp between_hosts(const Reduction& r) {
  const bool summed = r.op == c10d::ReduceOp::AVG || r.op == c10d::ReduceOp::PREMUL_SUM;
  return c10d::ReduceOp(summed ? c10d::ReduceOp::SUM : r.op);
}

// Pipelined chunks of a hierarchical all_reduce: large enough that gloo's per-call cost stays
// small beside a chunk's transfer over a network (a 4 MiB all_reduce ran at 0.8 GB/s over the
// test's veth, near the largest sizes' rate), small enough that a 16 MiB buffer has 4.
constexpr size_t kChunkBytes = size_t{4} << 20;

}  // namespace

size_t HostLayout::widest() const {
  size_t w = 0;
  for (const auto& h : ranks) w = std::max(w, h.size());
  return w;
}

void hybrid_allreduce(ShmGroup& g, c10d::Backend* leaders, const Piece& mine_all, int64_t numel, c10::ScalarType dtype,
                      const Reduction& r, const std::string& sig, const char* what) {
  const size_t es = c10::elementSize(dtype);
  const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / es));
  const int64_t chunks = std::max<int64_t>(1, (numel + per_chunk - 1) / per_chunk);
  auto chunk = [&](int64_t k) {
    Piece p = mine_all;
    const int64_t lo = k * per_chunk, n = std::min(numel, lo + per_chunk) - lo;
    p.at.offset += static_cast<uint64_t>(lo) * es;
    p.bytes = static_cast<uint64_t>(std::max<int64_t>(n, 0)) * es;
    return std::make_pair(p, n);
  };
  // Every rank runs the same rounds inside the host: reduce k, then hand out k - 1 (whose
  // exchange between hosts the leader started after reducing it).
  c10::intrusive_ptr<c10d::Work> exchanging;
  auto hand_out = [&](int64_t k) {
    if (exchanging) exchanging->wait();
    exchanging.reset();
    shm_broadcast(g, {chunk(k).first}, 0, sig, what);
  };
  try {
    for (int64_t k = 0; k < chunks; ++k) {
      const auto [p, n] = chunk(k);
      shm_reduce(g, what, p, n, dtype, r, sig, 0);
      c10::intrusive_ptr<c10d::Work> started;
      if (leaders != nullptr && n > 0) {
        // gloo reads and writes the device memory in place: it is host memory on the software core.
        Tensors c{at::from_blob(mine(g, p), {n}, at::TensorOptions().dtype(dtype))};
        c10d::AllreduceOptions o;
        o.reduceOp = between_hosts(r);
        started = leaders->allreduce(c, o);
      }
      if (k > 0) hand_out(k - 1);
      exchanging = started;
    }
    hand_out(chunks - 1);
  } catch (...) {
    // The task must not end while gloo may still write into the tensor's memory; gloo's own
    // timeout (the leaders' share of the group's) bounds this wait.
    if (exchanging) {
      try {
        exchanging->wait();
      } catch (...) {
      }
    }
    throw;
  }
}

void hybrid_allgather(ShmGroup& g, c10d::Backend* leaders, const HostLayout& hosts, const Piece& in,
                      const std::vector<Piece>& outs, const std::string& sig, const char* what) {
  const auto& here = hosts.ranks[hosts.host];
  std::vector<Piece> gathered;  // the leader's outputs for its own host's ranks
  if (g.rank() == 0) {
    for (int r : here) gathered.push_back(outs[r]);
  }
  shm_gather(g, what, in, gathered, sig);
  const size_t bytes = in.bytes;
  if (leaders != nullptr && bytes > 0) {
    // Bytes, not elements: gloo's all_gather then takes every dtype the group does.
    const int64_t slot = static_cast<int64_t>(bytes);
    const at::Tensor send = at::zeros({slot * static_cast<int64_t>(hosts.widest())}, at::kByte);
    for (size_t i = 0; i < here.size(); ++i) std::memcpy(bytes_of(send) + i * bytes, mine(g, outs[here[i]]), bytes);
    std::vector<Tensors> recv(1);
    for (size_t h = 0; h < hosts.ranks.size(); ++h) recv[0].push_back(at::empty_like(send));
    Tensors sends{send};
    leaders->allgather(recv, sends)->wait();
    for (size_t h = 0; h < hosts.ranks.size(); ++h) {
      if (static_cast<int>(h) == hosts.host) continue;
      for (size_t i = 0; i < hosts.ranks[h].size(); ++i)
        std::memcpy(mine(g, outs[hosts.ranks[h][i]]), bytes_of(recv[0][h]) + i * bytes, bytes);
    }
  }
  shm_broadcast(g, outs, 0, sig, what);
}

void hybrid_reduce_scatter(ShmGroup& g, c10d::Backend* leaders, const HostLayout& hosts, const Piece& in,
                           const std::vector<Piece>& blocks, const Piece& out, int64_t numel, c10::ScalarType dtype,
                           const Reduction& r, const std::string& sig, const char* what) {
  const bool leader = g.rank() == 0;
  const auto& here = hosts.ranks[hosts.host];
  const size_t bytes = out.bytes;
  const int64_t blocks_in = static_cast<int64_t>(in.bytes / std::max<size_t>(bytes, 1));
  Piece sum = in;  // where this rank's contribution is read (and, on the leader, the host's sum written)
  if (leader && !blocks.empty() && bytes > 0) {
    sum = blocks[0];
    sum.bytes = in.bytes;
    std::memcpy(mine(g, sum), mine(g, in), in.bytes);
  }
  shm_reduce(g, what, sum, numel * blocks_in, dtype, r, sig, 0);
  std::vector<Piece> slots;  // the leader's block for each of its host's ranks, by local rank
  if (leader) {
    if (leaders != nullptr && bytes > 0) {
      const int64_t n = numel * static_cast<int64_t>(hosts.widest());
      std::vector<Tensors> ins(1);
      for (const auto& host : hosts.ranks) {
        at::Tensor t = at::zeros({n}, at::TensorOptions().dtype(dtype));
        for (size_t i = 0; i < host.size(); ++i) std::memcpy(bytes_of(t) + i * bytes, mine(g, blocks[host[i]]), bytes);
        ins[0].push_back(t);
      }
      Tensors result{at::empty({n}, at::TensorOptions().dtype(dtype))};
      c10d::ReduceScatterOptions o;
      o.reduceOp = between_hosts(r);
      leaders->reduce_scatter(result, ins, o)->wait();
      for (size_t i = 0; i < here.size(); ++i)
        std::memcpy(mine(g, blocks[here[i]]), bytes_of(result[0]) + i * bytes, bytes);
    }
    for (int rank : here) slots.push_back(blocks[rank]);
  }
  shm_scatter(g, what, slots, out, numel, dtype, nullptr, 0, sig);
}

}  // namespace torch_neuronx
