// ProcessGroupNeuron: the c10d backend "neuron" (registered for device "neuron" by
// torch_neuronx/distributed.py).
//
// Policy:
// - A collective is a task on the group's own stream of the device, as a NCCL kernel is on its
//   communicator's stream: it first waits for the caller's current stream, and Work.wait() makes
//   the caller's current stream wait for it (the host does not block; barrier's wait does). Sends
//   and receives have a stream each, so a receive waiting for its peer holds nothing else back.
// - A task holds where its tensors' memory is (Piece, TensorDesc), never a tensor: torch keeps a
//   tensor's Python object alive while C++ holds it, so dropping the last C++ reference on a
//   worker takes the GIL, which a host thread waiting for that worker may hold (a DTensor op
//   waiting for a queue slot does): a deadlock. The tensors' blocks are recorded on the group's
//   stream instead (record_stream, as NCCL's are), so the allocator reuses them only after it.
// - Transport: ranks on one host use each other's device memory in place (neuronrt::ShmGroup
//   maps the peers' device memory files): a first round publishes where every rank's tensors
//   are, each rank then does its share of the work reading and writing any rank's tensors, and a
//   last round keeps them in place until all are done. A group spanning hosts is hybrid: the
//   ranks of each host form a shared-memory group, and gloo (which the Python factory creates and
//   hands in) runs between hosts. all_reduce, all_gather and reduce_scatter are hierarchical
//   (inside each host onto its first rank, those leaders exchange over gloo, each hands the
//   result out inside its host), so one share per host crosses the network; the other
//   collectives stage through host memory into gloo over all ranks. All run inside the task, so
//   the ordering is the same.
// - Reductions run in rank order, each element on one rank, written to every rank: every rank
//   gets bitwise the same result. 16-bit floats accumulate in float32.
// - Checks that need only this rank (devices, dtypes, sizes, layout) raise at the call; checks
//   that need all ranks (mismatched calls, sizes, a missing or dead rank, the timeout) fail the
//   task, abort the group for every rank, and raise at the next synchronizing call; any later
//   collective on the group raises at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "distributed/hybrid_collectives.h"

namespace neuronrt {
class ShmGroup;
}

namespace torch_neuronx {

class ProcessGroupNeuron : public c10d::Backend {
 public:
  // Where a hybrid group's ranks are: this host's ranks and the exchange between hosts.
  struct Hosts {
    c10::intrusive_ptr<c10d::Store> local_store;  // keys private to this host's ranks
    int local_rank = 0;
    int local_size = 1;
    c10::intrusive_ptr<c10d::Backend> leaders;  // on each host's first rank only: gloo between hosts
    std::string description;                    // which host this rank is on and which the others are
    HostLayout layout;                          // which group ranks each host has
  };
  // `host` is null when every rank shares this host; otherwise collectives run over it (all of
  // them, unless `hosts` makes the group hybrid).
  ProcessGroupNeuron(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout, std::string label, c10::intrusive_ptr<c10d::Backend> host,
                     std::optional<Hosts> hosts = std::nullopt);
  ~ProcessGroupNeuron() override;

  const std::string getBackendName() const override { return "neuron"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // "shm" (one host), "host" (gloo for everything) or "hybrid" (shared memory inside hosts).
  std::string transport() const { return host_ == nullptr ? "shm" : hosts_ ? "hybrid" : "host"; }
  // A new timeout for the group's later collectives, as gloo and NCCL take one (_set_pg_timeout).
  void setTimeout(std::chrono::milliseconds timeout) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // How a collective runs inside its task: on the shared-memory group, or (a group spanning
  // hosts) over the host backend with tensors staged through host memory.
  using ShmBody = std::function<void(neuronrt::ShmGroup&)>;
  using HostBody = std::function<void(c10d::Backend& host)>;

 private:
  struct Call;
  // The group's streams: collectives on one; sends and receives each on their own, so a rank's
  // receive waiting for its peer holds back neither its sends nor its collectives.
  enum Lane { kCollectives = 0, kSends = 1, kReceives = 2 };
  // Checks the tensors' device and queues the collective; `blocking` makes Work.wait() wait on
  // the host too (barrier).
  c10::intrusive_ptr<c10d::Work> enqueue(const char* name, c10d::OpType type, std::vector<at::Tensor> tensors,
                                         std::vector<at::Tensor> outputs, ShmBody shm, HostBody host,
                                         bool blocking = false, std::optional<c10::Device> device = std::nullopt,
                                         Lane lane = kCollectives);
  // The group's device, bound at its first collective; `hint` serves a call without tensors.
  c10::Device device_for(const std::vector<at::Tensor>& tensors, const char* name, std::optional<c10::Device> hint);
  // reduce_scatter of `in` (the group's blocks, one after another) into `out`, both forms.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(const char* name, c10d::OpType type, const char* what,
                                                     const at::Tensor& out, const at::Tensor& in,
                                                     const c10d::ReduceScatterOptions& opts);
  // allreduce (root < 0), allreduce_coalesced and reduce: each tensor reduced in turn, one task.
  c10::intrusive_ptr<c10d::Work> reduce_each(const char* name, c10d::OpType type,
                                             const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& op,
                                             int root);

  std::atomic<int64_t> timeout_ms_;  // read by getBackendOptions, set by setTimeout
  std::string label_;
  std::shared_ptr<neuronrt::ShmGroup> shm_;  // shared with queued tasks; a hybrid group's: this host's ranks
  c10::intrusive_ptr<c10d::Backend> host_;
  std::optional<Hosts> hosts_;
  std::mutex mu_;
  std::optional<c10::Device> device_;  // bound at the first collective (or barrier's device)
  std::vector<c10::Stream> streams_;   // this group's streams on that device, by Lane
};

}  // namespace torch_neuronx
