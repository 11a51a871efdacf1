#include "distributed/shm_collectives.h"

#include <algorithm>
#include <cstring>

#include "core/device.h"

namespace torch_neuronx {
namespace {

using neuronrt::ShmGroup;

// The first round: every rank publishes where its pieces are, and learns everyone's. The last
// round (finish) keeps every rank's tensors in place until no rank touches them any more.
std::vector<std::vector<Piece>> publish(ShmGroup& g, const std::vector<Piece>& mine) {
  const uint64_t count = mine.size();
  TORCH_CHECK(sizeof(count) + count * sizeof(Piece) <= g.buffer_bytes(), "neuron: a collective on ", g.label(),
              " passes ", count, " tensors per rank; at most ", (g.buffer_bytes() - sizeof(count)) / sizeof(Piece),
              " fit");
  std::memcpy(g.mine(), &count, sizeof(count));
  std::memcpy(g.mine() + sizeof(count), mine.data(), count * sizeof(Piece));
  g.arrive();
  std::vector<std::vector<Piece>> all(g.size());
  for (int q = 0; q < g.size(); ++q) {
    uint64_t n = 0;
    std::memcpy(&n, g.buffer(q), sizeof(n));
    all[q].resize(n);
    std::memcpy(all[q].data(), g.buffer(q) + sizeof(n), n * sizeof(Piece));
  }
  return all;
}

void finish(ShmGroup& g) {
  g.arrive();
  g.end();
}

uint8_t* at(ShmGroup& g, int rank, const Piece& p, size_t offset = 0) { return g.peer(rank, p.at) + offset; }

void copy(ShmGroup& g, int dst_rank, const Piece& dst, size_t dst_off, int src_rank, const Piece& src, size_t src_off,
          size_t bytes) {
  if (bytes) std::memcpy(at(g, dst_rank, dst, dst_off), at(g, src_rank, src, src_off), bytes);
}

// This rank's share of `count` items: ranks split every collective's work evenly.
std::pair<size_t, size_t> share(size_t count, int n, int r) { return {count * r / n, count * (r + 1) / n}; }

}  // namespace

Piece piece(const at::Tensor& t, size_t offset, size_t bytes) {
  Piece p;
  p.bytes = std::min(bytes, nbytes(t) - std::min(nbytes(t), offset));
  if (p.bytes == 0) return p;
  const int d = t.device().index();
  p.at = {d, checked([&] { return runtime().memory(d).offset_of(ptr(t) + offset); })};
  return p;
}

std::vector<Piece> pieces(const std::vector<at::Tensor>& ts) {
  std::vector<Piece> out;
  for (const auto& t : ts) out.push_back(piece(t));
  return out;
}

// Rank r reduces its share of the elements across all ranks' tensors and writes the result into
// every rank's tensor (allreduce) or the root's (reduce).
void shm_reduce(ShmGroup& g, const char* what, const Piece& mine, int64_t numel, c10::ScalarType dtype,
                const Reduction& r, const std::string& sig, int root) {
  g.begin(what, sig);
  const auto all = publish(g, {mine});
  const size_t es = c10::elementSize(dtype);
  const auto [lo, hi] = share(numel, g.size(), g.rank());
  if (hi > lo) {
    std::vector<const void*> src;
    std::vector<void*> outs;
    for (int q = 0; q < g.size(); ++q) {
      src.push_back(at(g, q, all[q][0], lo * es));
      if (root < 0 || q == root) outs.push_back(at(g, q, all[q][0], lo * es));
    }
    reduce_into(outs.data(), static_cast<int>(outs.size()), src.data(), g.size(), hi - lo, dtype, r);
  }
  finish(g);
}

void shm_broadcast(ShmGroup& g, const std::vector<Piece>& mine, int root, const std::string& sig, const char* what) {
  g.begin(what, sig);
  const auto all = publish(g, mine);
  for (size_t k = 0; k < mine.size(); ++k) {
    const auto [lo, hi] = share(mine[k].bytes, g.size(), g.rank());
    for (int q = 0; q < g.size(); ++q) {
      if (q != root) copy(g, q, all[q][k], lo, root, all[root][k], lo, hi - lo);
    }
  }
  finish(g);
}

// Rank r's input lands in outs[r] of every rank that publishes outputs (gather: the root).
void shm_gather(ShmGroup& g, const char* what, const Piece& in, const std::vector<Piece>& outs,
                const std::string& sig) {
  g.begin(what, sig);
  std::vector<Piece> mine{in};
  mine.insert(mine.end(), outs.begin(), outs.end());
  const auto all = publish(g, mine);
  for (int q = 0; q < g.size(); ++q) {
    if (all[q].size() > 1) copy(g, q, all[q][1 + g.rank()], 0, g.rank(), in, 0, in.bytes);
  }
  finish(g);
}

// Rank r receives the root's ins[r] (scatter) or the reduction of every rank's ins[r].
void shm_scatter(ShmGroup& g, const char* what, const std::vector<Piece>& ins, const Piece& out, int64_t numel,
                 c10::ScalarType dtype, const Reduction* r, int root, const std::string& sig) {
  g.begin(what, sig);
  const auto all = publish(g, ins);
  if (r == nullptr) {
    copy(g, g.rank(), out, 0, root, all[root][g.rank()], 0, out.bytes);
  } else if (numel > 0) {
    std::vector<const void*> src;
    for (int q = 0; q < g.size(); ++q) src.push_back(at(g, q, all[q][g.rank()]));
    void* dst = at(g, g.rank(), out);
    reduce_into(&dst, 1, src.data(), g.size(), numel, dtype, *r);
  }
  finish(g);
}

// Rank r pulls every rank's piece for r; a receiver whose sizes disagree with its senders fails
// the group for everyone.
void shm_alltoall(ShmGroup& g, const std::vector<Piece>& send, const std::vector<Piece>& recv) {
  g.begin("alltoall", "alltoall");
  const auto all = publish(g, send);
  for (int q = 0; q < g.size(); ++q) {
    const Piece& from = all[q][g.rank()];
    if (from.bytes != recv[q].bytes) {
      const std::string msg = "neuron: alltoall on " + g.label() + ": rank " + std::to_string(q) + " sends " +
                              std::to_string(from.bytes) + " bytes to rank " + std::to_string(g.rank()) +
                              ", whose output splits expect " + std::to_string(recv[q].bytes);
      g.abort(msg);
      throw neuronrt::CollectiveError(msg);
    }
    copy(g, g.rank(), recv[q], 0, q, from, 0, from.bytes);
  }
  finish(g);
}

}  // namespace torch_neuronx
