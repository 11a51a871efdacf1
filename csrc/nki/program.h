// An NKI kernel, traced once per signature (torch_neuronx/nki/_trace.py), as a flat program of
// whole-tile steps over three kinds of memory: the kernel's HBM tensors, the SBUF and PSUM arenas
// (one byte array each, 128 partitions × the profile's bytes per partition, addressed by the
// offsets the tracer's allocator gave each tile), and fp32 registers for an instruction's
// intermediates. Running it is C++ only — a queue worker never needs the GIL — and the same
// program serves the device (one task on the current stream) and the host simulator (run in place
// on CPU tensors). Every step is ATen work on views of whole tiles, never an element loop.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/tensor_desc.h"
#include "pipeline/op_record.h"

namespace torch_neuronx::nki {

// Where an operand lives: an HBM tensor (0..), an arena, a constant of the program, a register.
struct Operand {
  int32_t space = 0;  // kHbm, kSbuf, kPsum, kConst, kReg
  int32_t index = 0;  // which HBM tensor, constant or register
  c10::ScalarType dtype = c10::ScalarType::Float;
  int64_t byte_offset = 0;
  c10::SmallVector<int64_t, 4> sizes, strides;  // strides in elements of dtype
};

enum Space : int32_t { kHbm = 0, kSbuf = 1, kPsum = 2, kConst = 3, kReg = 4 };

// Steps. Scalars (an operand given as a number) travel in `f`, flagged in `i`.
enum Op : int32_t {
  kCopy = 0,         // o0 = o1 (cast to o0's dtype; registers keep fp32)
  kFill,             // o0 = f0
  kActivate,         // o0 = fn(o1 * scale + bias); i: fn, scale is an operand?, bias is an operand?; f: scale, bias
  kBinary,           // o0 = a op b; i: op, a scalar?, b scalar?; f: a, b
  kReduce,           // o0 = reduce(o1) over dims i[2:], i0 op, i1 negate
  kMatmul,           // o0 (+)= o1ᵀ @ o2 (fp32 accumulation); i0 accumulate
  kTranspose,        // o0 = o1 with partition and (flattened) free dims swapped
  kWhere,            // o0 = o1 (bool) ? o2 : o3, or f0 without o3
  kTop8,             // o0 = the 8 largest of each partition of o1, descending
  kPartitionReduce,  // o0 = reduce(o1) over the partition dim; i0 op
  kMatmulGroup,      // o0 = Σ o[2i+1]ᵀ @ o[2i+2] by one 16-bit GEMM, rounded once (nki/_fuse.py)
  kScan,             // o0[:, j] = op1(op0(o1[:, j], o0[:, j-1]), o2[:, j]), from initial o3 or f0 (free dims
                     // flattened; a one-row o1/o2 serves all partitions); i: op0, op1, reverse0, reverse1,
                     // initial is an operand?
  kFindIndex8,       // o0[p, k] = the first j with o1[p, j] == o2[p, k] (free dims flattened)
  kRng,              // an engine's per-partition XORWOW generators (i0: 0 vector, 1 GpSimd); i1: 0 o0 =
                     // 32 random bits each (int64), 1 o0 = uniform fp32 in [0, 1), 2 seed every lane from
                     // o0's first value, 3 o0 = the lanes' states, 4 the lanes' states = o0 (uint32)
  kGather,           // o0[p, k] = o1[p, o2[p, k]] (free dims flattened; an index past the row is an error)
  kMatchReplace8,    // o0 = o1 with, for k = 0..7 in turn, the first element of partition p equal to o2[p, k]
                     // replaced by f0 (so equal values match successive elements); o3 (if given) = those
                     // indices, all ones where a value is absent; in fp32, free dims flattened
  kOffsetCopy,       // o0 = o1 with operand i0 (0: o0, 1: o1) moved by run-time integers: by o2's one
                     // integer x i1 bytes (i2 = -1), or entry r of its dim i2 by o2's r-th integer x i1 bytes;
                     // each integer within i3..i4 (else an error, or no transfer where i5 is 1: oob_mode=skip)
  kNonzero,          // per partition p of o1 (free dims flattened, T elements): o0[p, :N] = the indices
                     // (+ f0) of its N nonzero elements in order, o0[p, N:T] = f1, o0[p, T] = N
  kPrint,            // prints the text of o1 (i0 bytes of a uint8 constant) and the values of o0 (nl.device_print)
  kLocalGather       // per 16-partition group g: its indices k = o2[g's partitions, :] flattened partition first,
                     // the first i1; o0[p, k·i0 + e] = o1[p, idx_k + e] for e < i0 (free dims flattened)
};

struct Step {
  int32_t op = 0;
  c10::SmallVector<Operand, 4> operands;
  c10::SmallVector<int64_t, 4> i;
  c10::SmallVector<double, 2> f;
};

class Program : public std::enable_shared_from_this<Program> {
 public:
  // What the program's HBM tensors are: elements and dtype, arguments then outputs.
  struct Io {
    int64_t numel;
    c10::ScalarType dtype;
  };
  // `sbuf_row` and `psum_row`: the bytes of each partition the program addresses.
  Program(std::string name, std::vector<Step> steps, std::vector<at::Tensor> constants, int64_t sbuf_row,
          int64_t psum_row, int registers, std::vector<Io> io);
  // Runs on `hbm` (CPU tensors or CPU views of device memory, in the kernel's argument order then
  // its outputs), on the calling thread.
  void run(const std::vector<at::Tensor>& hbm) const;
  // Queues the run as `rec`'s task on the current stream of `device`, over the device tensors
  // `io` describes (the program's arguments then its outputs; it checks they are its own). Of the
  // first `inputs`, one not dense is made dense inside the task.
  // The task is named `task` (one that outlives it), or for `rec`.
  void launch(c10::DeviceIndex device, OpRecord& rec, std::vector<TensorDesc> io, size_t inputs,
              const char* task = nullptr) const;
  // nki.jit's call: the kernel's own task, on the device of `hbm` (dense neuron tensors).
  void launch(const std::vector<at::Tensor>& hbm) const;
  const std::string& name() const { return name_; }
  // Unique per program in the process: how a profiler's note of a launch finds its trace.
  int64_t serial() const { return serial_; }
  const std::vector<Io>& io() const { return io_; }
  size_t size() const { return steps_.size(); }

  static const std::vector<std::string>& activation_names();
  static const std::vector<std::string>& binary_names();
  static const std::vector<std::string>& reduce_names();

 private:
  std::string name_;
  std::string task_name_;  // "nki::<name>", its launches' host op and task
  int64_t serial_;
  std::vector<Step> steps_;
  std::vector<at::Tensor> constants_;
  int64_t sbuf_row_, psum_row_;
  int registers_;
  std::vector<Io> io_;
};

}  // namespace torch_neuronx::nki
