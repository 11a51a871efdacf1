// The collectives' bodies on one host: ranks read and write each other's device memory in place
// (neuronrt::ShmGroup::peer). Each is one round publishing where every rank's tensors are, every
// rank's share of the work, and a last round that keeps the tensors in place until all are done.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "distributed/reduce.h"
#include "neuronrt/shm_group.h"

namespace torch_neuronx {

inline uint8_t* ptr(const at::Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }
inline size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// A byte range of a rank's device memory.
struct Piece {
  neuronrt::Location at;
  uint64_t bytes = 0;
};

// Where `bytes` of `t` from `offset` lie (the whole tensor by default); found on the host, at the call.
Piece piece(const at::Tensor& t, size_t offset = 0, size_t bytes = SIZE_MAX);
std::vector<Piece> pieces(const std::vector<at::Tensor>& ts);

// allreduce (root < 0) and reduce: every rank's tensor in place, or the root's.
void shm_reduce(neuronrt::ShmGroup& g, const char* what, const Piece& mine, int64_t numel, c10::ScalarType dtype,
                const Reduction& r, const std::string& sig, int root);
// The root's pieces copied into every rank's, in one round; `what` names the collective in errors
// (the hierarchical collectives end with this broadcast).
void shm_broadcast(neuronrt::ShmGroup& g, const std::vector<Piece>& mine, int root, const std::string& sig,
                   const char* what = "broadcast");
// Rank r's input lands in outs[r] of every rank that passes outputs (gather: the root).
void shm_gather(neuronrt::ShmGroup& g, const char* what, const Piece& in, const std::vector<Piece>& outs,
                const std::string& sig);
// Rank r receives the root's ins[r] (scatter, r == nullptr) or the reduction of every rank's ins[r].
void shm_scatter(neuronrt::ShmGroup& g, const char* what, const std::vector<Piece>& ins, const Piece& out,
                 int64_t numel, c10::ScalarType dtype, const Reduction* r, int root, const std::string& sig);
// send[j]: this rank's piece for rank j; recv[q]: where rank q's piece for this rank goes.
void shm_alltoall(neuronrt::ShmGroup& g, const std::vector<Piece>& send, const std::vector<Piece>& recv);

}  // namespace torch_neuronx
