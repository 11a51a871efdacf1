// Small kernels on the queue worker alone, without its OpenMP team, where that changes no bits.
//
// Each parallel region of the worker's kernel team wakes the team's helper, which sleeps between
// regions (executor.cpp's parked team makes libgomp throttle its spinning, so that it leaves the
// host thread's core alone). In a VM a wake costs about 30 µs, more than a small kernel's whole
// work: a multiply of 2^17 floats took 50 µs on the team and 25 µs alone (issue 38's note). Alone,
// a kernel keeps the CPU's bits only if every output element is computed the same way however
// the work is split: exact elementwise arithmetic (one correctly rounded IEEE operation or none:
// +, -, *, /, sqrt, neg, x ** 2, float rsqrt), sums and means into several outputs, each of
// which one thread computes (aten/solo_ops.h), moves of data (copies, fills, cat, index_select)
// and fused Adam, whose split falls on 64-byte units (the boxed ops flagged kSplitInvariant in
// pipeline/op_overrides.cpp).
// Reductions into one element, whose partial sums follow the split, transcendental functions,
// whose vectorized body and scalar tail round differently, matrix products (MKL's and oneDNN's
// splits are their own), and kernels that size their work by the thread count (the CPU's flash
// attention gives other bits for a decode step on one thread) keep the team.
#pragma once

#include <cstdint>

namespace torch_neuronx {

// The most elements of any tensor of a call that runs alone: alone, a multiply of 2^18 floats took
// 46 µs against the team's 68; at 2^19 the two were even, above it the team wins. Fused AdamW on
// eight float tensors of 2^18 took 1.17 ms alone against the team's 1.08, of 2^16 0.29 against 0.42.
constexpr int64_t kSoloElements = int64_t{1} << 18;

// While alive on a queue worker (`solo` true), kernels there run on that one thread:
// at::get_num_threads() is 1 there, so at::parallel_for opens no parallel region. The thread's
// team size comes back when it ends.
class SoloTeam {
 public:
  explicit SoloTeam(bool solo);
  ~SoloTeam();
  SoloTeam(const SoloTeam&) = delete;
  SoloTeam& operator=(const SoloTeam&) = delete;

 private:
  int restore_ = 0;  // the team size to restore; 0: nothing was changed
};

}  // namespace torch_neuronx
