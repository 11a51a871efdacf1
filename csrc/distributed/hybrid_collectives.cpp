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

// Pipelined chunks of a hierarchical collective: large enough that gloo's per-call cost stays
// small beside a chunk's transfer over a network (a 4 MiB all_reduce ran at 0.8 GB/s over the
// test's veth, near the largest sizes' rate), small enough that a 16 MiB buffer has 4.
constexpr size_t kChunkBytes = size_t{4} << 20;

// Byte range [lo, lo + n) of a piece (clamped to it).
Piece sub(const Piece& p, uint64_t lo, uint64_t n) {
  Piece q = p;
  q.bytes = lo >= p.bytes ? 0 : std::min(n, p.bytes - lo);
  if (q.bytes) q.at.offset += lo;
  return q;
}

// Runs `chunks` steps of a hierarchical collective so that the leaders' exchange of step k (on
// gloo's own threads) overlaps the work inside the host on step k + 1 and the hand-out of k - 1.
// Every rank runs the same rounds inside the host, in the order inside(k), hand_out(k - 1).
// `start(k)` runs on the leader only and returns the exchange it started (or null).
template <class Inside, class Start, class HandOut>
void pipelined(int64_t chunks, bool leader, Inside inside, Start start, HandOut hand_out) {
  c10::intrusive_ptr<c10d::Work> exchanging;
  auto finish = [&](int64_t k) {
    if (exchanging) exchanging->wait();
    exchanging.reset();
    hand_out(k);
  };
  try {
    for (int64_t k = 0; k < chunks; ++k) {
      inside(k);
      c10::intrusive_ptr<c10d::Work> started = leader ? start(k) : nullptr;
      if (k > 0) finish(k - 1);
      exchanging = started;
    }
    finish(chunks - 1);
  } catch (...) {
    // The task must not end while gloo may still write into the tensors' memory; gloo's own
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

}  // namespace

size_t HostLayout::widest() const {
  size_t w = 0;
  for (const auto& h : ranks) w = std::max(w, h.size());
  return w;
}

void hybrid_allreduce(ShmGroup& g, c10d::Backend* leaders, const Piece& mine_all, int64_t numel, c10::ScalarType dtype,
                      const Reduction& r, const std::string& sig, const char* what) {
  const uint64_t es = c10::elementSize(dtype);
  const uint64_t per_chunk = std::max<uint64_t>(1, kChunkBytes / es);  // elements
  const int64_t chunks = std::max<int64_t>(1, (numel + per_chunk - 1) / per_chunk);
  auto chunk = [&](int64_t k) { return sub(mine_all, k * per_chunk * es, per_chunk * es); };
  pipelined(
      chunks, leaders != nullptr,
      [&](int64_t k) { shm_reduce(g, what, chunk(k), chunk(k).bytes / es, dtype, r, sig, 0); },
      [&](int64_t k) -> c10::intrusive_ptr<c10d::Work> {
        const Piece p = chunk(k);
        if (p.bytes == 0) return nullptr;
        // gloo reads and writes the device memory in place: it is host memory on the software core.
        Tensors c{at::from_blob(mine(g, p), {static_cast<int64_t>(p.bytes / es)}, at::TensorOptions().dtype(dtype))};
        c10d::AllreduceOptions o;
        o.reduceOp = gloo_op(r);
        return leaders->allreduce(c, o);
      },
      [&](int64_t k) { shm_broadcast(g, {chunk(k)}, 0, sig, what); });
}

void hybrid_allgather(ShmGroup& g, c10d::Backend* leaders, const HostLayout& hosts, const Piece& in,
                      const std::vector<Piece>& outs, const std::string& sig, const char* what) {
  const auto& here = hosts.ranks[hosts.host];
  const uint64_t bytes = in.bytes;
  // A chunk is the same byte range of every rank's piece; the leaders exchange one per host.
  const uint64_t per_chunk = std::max<uint64_t>(1, kChunkBytes / hosts.widest());
  const int64_t chunks = std::max<int64_t>(1, (bytes + per_chunk - 1) / per_chunk);
  auto outs_of = [&](int64_t k) {
    std::vector<Piece> o;
    for (const auto& p : outs) o.push_back(sub(p, k * per_chunk, per_chunk));
    return o;
  };
  // Bytes, not elements: gloo's all_gather then takes every dtype the group does. Two exchanges
  // are in flight at most (k and k - 1), each with its own buffers.
  std::vector<Tensors> recv[2];
  pipelined(
      chunks, leaders != nullptr,
      [&](int64_t k) {
        std::vector<Piece> gathered;  // the leader's outputs for its own host's ranks
        const std::vector<Piece> o = outs_of(k);
        if (g.rank() == 0) {
          for (int r : here) gathered.push_back(o[r]);
        }
        shm_gather(g, what, sub(in, k * per_chunk, per_chunk), gathered, sig);
      },
      [&](int64_t k) -> c10::intrusive_ptr<c10d::Work> {
        const std::vector<Piece> o = outs_of(k);
        const uint64_t n = o[here[0]].bytes;
        if (n == 0) return nullptr;
        const at::Tensor send = at::zeros({static_cast<int64_t>(n * hosts.widest())}, at::kByte);
        for (size_t i = 0; i < here.size(); ++i) std::memcpy(bytes_of(send) + i * n, mine(g, o[here[i]]), n);
        auto& into = recv[k % 2];
        into.assign(1, {});
        for (size_t h = 0; h < hosts.ranks.size(); ++h) into[0].push_back(at::empty_like(send));
        Tensors sends{send};
        return leaders->allgather(into, sends);
      },
      [&](int64_t k) {
        const std::vector<Piece> o = outs_of(k);
        const auto& got = recv[k % 2];
        if (g.rank() == 0 && !got.empty()) {
          const uint64_t n = o[here[0]].bytes;
          for (size_t h = 0; h < hosts.ranks.size(); ++h) {
            if (static_cast<int>(h) == hosts.host) continue;
            for (size_t i = 0; i < hosts.ranks[h].size(); ++i)
              std::memcpy(mine(g, o[hosts.ranks[h][i]]), bytes_of(got[0][h]) + i * n, n);
          }
        }
        recv[k % 2].clear();
        shm_broadcast(g, o, 0, sig, what);
      });
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
      o.reduceOp = gloo_op(r);
      leaders->reduce_scatter(result, ins, o)->wait();
      for (size_t i = 0; i < here.size(); ++i)
        std::memcpy(mine(g, blocks[here[i]]), bytes_of(result[0]) + i * bytes, bytes);
    }
    for (int rank : here) slots.push_back(blocks[rank]);
  }
  shm_scatter(g, what, slots, out, numel, dtype, nullptr, 0, sig);
}

}  // namespace torch_neuronx
