#include "exec/solo_team.h"

#include <dlfcn.h>

namespace torch_neuronx {
namespace {

// A thread's team size is its OpenMP nthreads ICV, which ATen reads (get_num_threads is
// omp_get_max_threads). This library is built without OpenMP, so the calls go to the libgomp torch
// loaded; without one, kernels have no team and there is nothing to do.
struct TeamSize {
  using Set = void (*)(int);
  using Get = int (*)();
  Set set = reinterpret_cast<Set>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  Get get = reinterpret_cast<Get>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  bool usable() const { return set != nullptr && get != nullptr; }
};

const TeamSize& team_size() {
  static const TeamSize t;
  return t;
}

}  // namespace

SoloTeam::SoloTeam(bool solo) {
  if (!solo) return;
  const auto& t = team_size();
  if (!t.usable()) return;
  const int n = t.get();
  if (n <= 1) return;
  restore_ = n;
  t.set(1);
}

SoloTeam::~SoloTeam() {
  if (restore_ > 0) team_size().set(restore_);
}

}  // namespace torch_neuronx
