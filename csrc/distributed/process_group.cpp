// The machinery every collective shares: binding the group to a device, the group's stream, the
// task and its Work. The collectives themselves are in collectives.cpp.
#include "distributed/process_group.h"

#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/allocator.h"
#include "core/device.h"
#include "exec/executor.h"
#include "neuronrt/shm_group.h"
#include "pipeline/op_record.h"

namespace torch_neuronx {
namespace {

// What each collective ("neuron::allreduce", ...) is known by, made on its first call:
// - its record, so collectives are counted with the ops (torch_neuronx.op_counts()): every call is
//   a queued task;
// - its task's name, which a profiler shows as the kernel: NCCL's pattern, "ncclKernel_" and the
//   collective ("ncclKernel_allreduce"), since that is what HTA and TensorBoard's profiler plugin
//   class as communication (a kernel's name is all they go by).
// Kept for the process's life (leaked): a task's name must outlive the task, and queue workers may
// outlive static teardown.
struct Collective {
  OpRecord* record = nullptr;
  std::string kernel;
};
const Collective& collective(const char* name) {
  static std::mutex mu;
  static auto* known = new std::map<std::string, Collective>();
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = known->try_emplace(name);
  if (fresh) {
    it->second.record = &typed_op(name, "a collective: a task on the process group's stream");
    const char* bare = std::strrchr(name, ':');
    it->second.kernel = "ncclKernel_" + std::string(bare != nullptr ? bare + 1 : name);
  }
  return it->second;
}

// What the task tells its Work: whether the collective failed, and why.
struct Status {
  std::atomic<bool> failed{false};
  std::string error;  // written before `failed`
};

class NeuronWork : public c10d::Work {
 public:
  NeuronWork(int rank, c10d::OpType type, c10::Stream stream, neuronrt::Queue* queue, uint64_t seq,
             std::shared_ptr<Status> status, std::vector<at::Tensor> outputs, bool blocking)
      : Work(rank, type),
        device_(stream.device()),
        stream_(stream),
        queue_(queue),
        seq_(seq),
        status_(std::move(status)),
        outputs_(std::move(outputs)),
        blocking_(blocking) {}

  bool isCompleted() override { return queue_->is_complete(seq_); }
  bool isSuccess() const override { return queue_->is_complete(seq_) && !status_->failed.load(); }
  std::exception_ptr exception() const override {
    if (!status_->failed.load()) return nullptr;
    return std::make_exception_ptr(c10::DistBackendError({__func__, __FILE__, __LINE__}, status_->error));
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  // Made on request (DDP's reducer asks; most callers never do): completed at once, with its
  // event recorded on the group's stream, after the collective.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(future_mu_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                         std::vector<c10::Device>{device_});
      c10::StreamGuard on_group_stream(stream_);
      future_->markCompleted(c10::IValue(outputs_));
    }
    return future_;
  }
  void synchronize() override { wait(kNoTimeout); }

  // NCCL's semantics: the caller's current stream waits for the collective, the host does not
  // (a barrier's host does). A failed collective fails the waiting stream too, so the error
  // reaches whoever uses the results.
  bool wait(std::chrono::milliseconds timeout) override {
    if (blocking_) {
      if (timeout == kNoTimeout) {
        queue_->wait_for(seq_);
      } else if (!queue_->wait_for(seq_, timeout)) {
        C10_THROW_ERROR(DistBackendError, "neuron: " + std::string(opTypeToString(opType_)) +
                                              " did not complete within " + std::to_string(timeout.count()) + " ms");
      }
      if (status_->failed.load()) C10_THROW_ERROR(DistBackendError, status_->error);
      return true;
    }
    neuronrt::Queue& waiter = current_queue(device_.index());
    if (&waiter == queue_ || queue_->is_complete(seq_)) {
      if (status_->failed.load()) C10_THROW_ERROR(DistBackendError, status_->error);
      return true;
    }
    launch(device_.index(), "neuron::collective_wait", [q = queue_, seq = seq_, status = status_] {
      q->wait_for(seq);
      if (status->failed.load()) C10_THROW_ERROR(DistBackendError, status->error);
    });
    return true;
  }

 private:
  c10::Device device_;
  c10::Stream stream_;
  neuronrt::Queue* queue_;
  uint64_t seq_;
  std::shared_ptr<Status> status_;
  std::vector<at::Tensor> outputs_;
  bool blocking_;
  std::mutex future_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

ProcessGroupNeuron::ProcessGroupNeuron(const c10::intrusive_ptr<c10d::Store>& group_store, int rank, int size,
                                       std::chrono::milliseconds timeout, std::string label,
                                       c10::intrusive_ptr<c10d::Backend> host, std::optional<Hosts> hosts)
    : Backend(rank, size),
      timeout_ms_(timeout.count()),
      label_(std::move(label)),
      host_(std::move(host)),
      hosts_(std::move(hosts)) {
  TORCH_CHECK(!hosts_ || host_, "neuron: a hybrid group needs the gloo group between hosts");
  if (host_ && !hosts_) return;
  const auto store = hosts_ ? hosts_->local_store : group_store;
  neuronrt::ShmGroupOptions o;
  o.rank = hosts_ ? hosts_->local_rank : rank;
  o.size = hosts_ ? hosts_->local_size : size;
  o.label = hosts_ ? label_ + ", its ranks on this host" : label_;
  o.timeout = timeout;
  for (int d = 0; d < device_count(); ++d)
    o.share_fds.push_back(checked([&] { return runtime().memory(d).share_fd(); }));
  o.store_set = [store](const std::string& k, const std::string& v) {
    store->set(k, std::vector<uint8_t>(v.begin(), v.end()));
  };
  o.store_get = [store](const std::string& k) {
    const auto v = store->get(k);
    return std::string(v.begin(), v.end());
  };
  shm_ = checked([&] { return std::make_shared<neuronrt::ShmGroup>(std::move(o)); });
}

ProcessGroupNeuron::~ProcessGroupNeuron() = default;

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupNeuron::getBackendOptions() {
  return c10::make_intrusive<Options>("neuron", std::chrono::milliseconds(timeout_ms_.load()));
}

void ProcessGroupNeuron::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(timeout.count() > 0, "neuron: ", label_, ": a timeout must be positive, got ", timeout.count(),
                    " ms");
  timeout_ms_.store(timeout.count());
  if (shm_) shm_->set_timeout(timeout);
  if (host_) host_->setTimeout(timeout);
  if (hosts_ && hosts_->leaders) hosts_->leaders->setTimeout(timeout);
}

c10::Device ProcessGroupNeuron::device_for(const std::vector<at::Tensor>& tensors, const char* name,
                                           std::optional<c10::Device> device) {
  for (const auto& t : tensors) {
    TORCH_CHECK(t.device().type() == kNeuron, "neuron: ", name, " on ", label_, " got a tensor on ", t.device(),
                "; the neuron backend takes neuron tensors (for CPU tensors, "
                "init_process_group(backend=\"cpu:gloo,neuron:neuron\"))");
    TORCH_CHECK(!device || *device == t.device(), "neuron: ", name, " got tensors on ", *device, " and ", t.device(),
                "; all must be on one device");
    device = t.device();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!device) device = device_.value_or(c10::Device(kNeuron, current_device()));
  if (!device_) {
    device_ = device;
    for (int lane = kCollectives; lane <= kReceives; ++lane) streams_.push_back(new_stream(device->index(), 0));
  }
  TORCH_CHECK(*device_ == *device, "neuron: ", name, " on ", label_, " got tensors on ", *device,
              ", but this rank's group runs on ", *device_, " (one device per rank: torch.neuron.set_device)");
  return *device_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::enqueue(const char* name, c10d::OpType type,
                                                           std::vector<at::Tensor> tensors,
                                                           std::vector<at::Tensor> outputs, ShmBody shm, HostBody host,
                                                           bool blocking, std::optional<c10::Device> hint, Lane lane) {
  const c10::Device device = device_for(tensors, name, hint);
  if (shm_) {
    if (const std::string why = shm_->aborted_reason(); !why.empty()) {
      C10_THROW_ERROR(DistBackendError, "neuron: " + std::string(name).substr(8) + " on " + label_ +
                                            " cannot run: the group is unusable since " + why);
    }
  }
  neuronrt::Queue& caller = current_queue(device.index());
  const c10::Stream stream = streams_[lane];
  neuronrt::Queue& queue = queue_of(stream);
  auto status = std::make_shared<Status>();
  uint64_t seq = 0;
  // The task holds no tensor (the header says why): the blocks wait for the group's stream instead.
  for (const auto& t : tensors) {
    if (t.has_storage()) caching_allocator().recordStream(t.storage().data_ptr(), stream);
  }
  const Collective& what = collective(name);
  checked([&] {
    neuronrt::Event ready;
    ready.record(caller);
    ready.block(queue);
    seq = queue.submit(what.kernel.c_str(),
                       [shm_group = shm_, host_backend = host_, shm = std::move(shm), host = std::move(host), status,
                        between = hosts_ ? "neuron: " + std::string(name).substr(8) + " on " + label_ +
                                               " failed between hosts (" + hosts_->description + "): "
                                         : std::string()] {
                         try {
                           if (host_backend) {
                             host(*host_backend);
                           } else {
                             shm(*shm_group);
                           }
                         } catch (const std::exception& e) {
                           // A hybrid group's errors from gloo say which hosts there are; those
                           // of this host's ranks (CollectiveError) already name the ranks.
                           const bool wrap = !between.empty() && !dynamic_cast<const neuronrt::CollectiveError*>(&e);
                           status->error = wrap ? between + e.what() : e.what();
                           status->failed.store(true);
                           if (shm_group) shm_group->abort(status->error);
                           if (wrap) throw std::runtime_error(status->error);
                           throw;
                         }
                       });
  });
  what.record->count(Mode::kAsync);
  return c10::make_intrusive<NeuronWork>(rank_, type, stream, &queue, seq, std::move(status), std::move(outputs),
                                         blocking);
}

}  // namespace torch_neuronx
