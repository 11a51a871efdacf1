// all_gather and reduce_scatter of a group spanning hosts, shaped as the hierarchical all_reduce
// is: inside a host the ranks work in each other's device memory, and only each host's first rank
// (its leader) talks to the other hosts, over gloo, with one buffer holding all of its host's
// share. Through gloo over all ranks every rank would send and receive its own piece, so each
// piece crossed between hosts once per rank of the receiving host.
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

#include "distributed/shm_collectives.h"

namespace torch_neuronx {

// Which of a group's ranks are on which host.
struct HostLayout {
  int host = 0;                         // this rank's host
  std::vector<std::vector<int>> ranks;  // per host: its group ranks, in the order of their local ranks
  // The most ranks any host has: the leaders exchange one slot per rank, hosts padded to this.
  size_t widest() const;
};

// Every rank's `mine` (any dense layout: `numel` elements from its start) becomes the reduction
// of all ranks'. The host's sum lands on its leader, the leaders all-reduce it, and each hands it
// out inside its host. A large buffer goes in chunks, so that the exchange of one chunk between
// hosts (gloo's own threads) overlaps the work inside the host on the next and the last.
void hybrid_allreduce(neuronrt::ShmGroup& g, c10d::Backend* leaders, const Piece& mine, int64_t numel,
                      c10::ScalarType dtype, const Reduction& r, const std::string& sig, const char* what);

// Group rank r's `in` lands in outs[r] of every rank. `leaders` is null except on a host's leader.
// Pipelined as all_reduce is, in chunks of the same byte range of every rank's piece.
void hybrid_allgather(neuronrt::ShmGroup& g, c10d::Backend* leaders, const HostLayout& hosts, const Piece& in,
                      const std::vector<Piece>& outs, const std::string& sig, const char* what);

// Rank r's `out` receives block r of the reduction of every rank's `in` (group-size blocks of
// `numel` elements). On the leader, `blocks[r]` is block r of a scratch buffer as large as `in`
// that holds the host's sum (the input itself is left as it was); elsewhere `blocks` is empty.
// `r` divides by the whole group (AVG) and scales (PREMUL_SUM) inside the host, so the leaders
// exchange a plain sum (so does hybrid_allreduce).
void hybrid_reduce_scatter(neuronrt::ShmGroup& g, c10d::Backend* leaders, const HostLayout& hosts, const Piece& in,
                           const std::vector<Piece>& blocks, const Piece& out, int64_t numel, c10::ScalarType dtype,
                           const Reduction& r, const std::string& sig, const char* what);

}  // namespace torch_neuronx
