#include "nki/program.h"

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/record_function.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

#include "core/storage.h"
#include "exec/device_check.h"
#include "exec/executor.h"
#include "exec/tensor_desc.h"
#include "nki/step_direct.h"
#include "nki/step_math.h"
#include "pipeline/op_record.h"

namespace torch_neuronx::nki {
namespace {

using namespace math;  // NOLINT: the steps are written in the arithmetic's terms

OpRecord& kernel_rec = typed_op("neuron::nki_kernel", "an NKI kernel's traced program, run as one task");

class Memory;

// An engine's random number generators: per partition lane, `streams` XORWOW generators of six
// 32-bit words (five xorshift words and a Weyl counter, Marsaglia's xorwow); a row's elements draw
// from the lane's streams in turn. Every run starts from seed 0 (a program holds no state between
// runs); the same seed gives the same numbers.
class Rng {
 public:
  explicit Rng(int streams) : streams_(streams), state_(static_cast<size_t>(kLanes * streams * 6)) { seed(0); }
  int64_t words() const { return int64_t{streams_} * 6; }

  void seed(uint32_t seed) {
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      uint64_t z = (uint64_t{seed} << 32) ^ static_cast<uint64_t>(lane * streams_);
      for (int64_t w = 0; w < words(); ++w) {
        z += 0x9E3779B97F4A7C15ull;  // splitmix64: distinct, well-mixed words per lane and stream
        uint64_t v = z;
        v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
        v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
        state_[lane * words() + w] = static_cast<uint32_t>(v ^ (v >> 31)) | (w % 6 == 0 ? 1u : 0u);
      }
    }
  }

  uint32_t next(int64_t lane, int64_t stream) {
    uint32_t* st = &state_[lane * words() + stream * 6];
    uint32_t t = st[4];
    const uint32_t s = st[0];
    st[4] = st[3];
    st[3] = st[2];
    st[2] = st[1];
    st[1] = s;
    t ^= t >> 2;
    t ^= t << 1;
    t ^= s ^ (s << 4);
    st[0] = t;
    st[5] += 362437u;
    return t + st[5];
  }

  void step(int64_t mode, Memory& mem, const Operand* o);

 private:
  static constexpr int64_t kLanes = 128;
  int streams_;
  std::vector<uint32_t> state_;
};

// The calling thread's SBUF or PSUM arena, kept between runs. A run needs no zeroed arena: the
// program fills each tile at its first use unless that instruction writes every byte of it
// (nki/_trace.py), and a fresh arena would cost its page faults on every run. A thread runs one
// program at a time.
at::Tensor arena(int which, int64_t bytes) {
  thread_local at::Tensor kept[2];
  at::Tensor& t = kept[which];
  if (!t.defined() || t.numel() < bytes) t = at::empty({bytes}, at::kByte);
  return t;
}

class Memory {
 public:
  Memory(const std::vector<at::Tensor>& hbm, const std::vector<at::Tensor>& constants, int64_t sbuf_row,
         int64_t psum_row, int registers)
      : hbm_(hbm),
        constants_(constants),
        sbuf_(arena(0, 128 * std::max<int64_t>(sbuf_row, 1))),
        psum_(arena(1, 128 * std::max<int64_t>(psum_row, 1))),
        regs_(registers) {}

  at::Tensor view(const Operand& o) {
    if (o.space == kReg) {
      const at::Tensor& r = regs_.at(o.index);
      TORCH_CHECK(r.defined(), "nki: register ", o.index, " read before it was written");
      return r;
    }
    const at::Tensor& base = o.space == kHbm    ? hbm_.at(o.index)
                             : o.space == kSbuf ? sbuf_
                             : o.space == kPsum ? psum_
                                                : constants_.at(o.index);
    const int64_t item = static_cast<int64_t>(c10::elementSize(o.dtype));
    const int64_t bytes = base.storage_offset() * static_cast<int64_t>(base.element_size()) + o.byte_offset;
    TORCH_CHECK(bytes % item == 0, "nki: an operand of ", c10::toString(o.dtype), " at byte ", bytes,
                " is not aligned to its element size");
    return make_cpu_tensor(base.storage(), c10::scalarTypeToTypeMeta(o.dtype), o.sizes, o.strides, bytes / item);
  }

  Rng& rng(int64_t engine) { return engine == 0 ? vector_rng_ : gpsimd_rng_; }

  // Writes `value` to `o`: a register takes it (fp32), memory casts it to its dtype.
  void write(const Operand& o, const at::Tensor& value) {
    if (o.space == kReg) {
      at::Tensor v = value.scalar_type() == at::kFloat || is_integral(value) ? value : value.to(at::kFloat);
      regs_.at(o.index) = o.sizes.empty() ? v : v.reshape(o.sizes);
      return;
    }
    at::Tensor dst = view(o);
    at::Tensor v = value.sizes().equals(dst.sizes()) ? value : value.reshape(dst.sizes());
    // A destination stepping 0 along a dim (an access pattern's [0, n], qkv_cte's throwaway output)
    // is written n times over in pattern order: the last element stays.
    for (int64_t d = 0; d < dst.dim(); ++d) {
      if (dst.stride(d) == 0 && dst.size(d) > 1) {
        dst = dst.narrow(d, dst.size(d) - 1, 1);
        v = v.narrow(d, v.size(d) - 1, 1);
      }
    }
    if (!direct::copy(dst, v)) dst.copy_(v);
  }

 private:
  const std::vector<at::Tensor>& hbm_;
  const std::vector<at::Tensor>& constants_;
  at::Tensor sbuf_, psum_;
  std::vector<at::Tensor> regs_;
  Rng vector_rng_{4}, gpsimd_rng_{1};  // NKI's state sizes: 24 words per Vector lane, 6 per GpSimd lane
};

void Rng::step(int64_t mode, Memory& mem, const Operand* o) {
  if (mode == 2) {
    seed(static_cast<uint32_t>(mem.view(*o).reshape({-1})[0].item<int64_t>()));
    return;
  }
  const int64_t parts = o->sizes.empty() ? 1 : o->sizes[0];
  int64_t n = 1;
  for (auto v : o->sizes) n *= v;
  n /= std::max<int64_t>(parts, 1);
  if (mode == 3 || mode == 4) {
    TORCH_CHECK(n == words(), "nki: an RNG state tile holds ", words(), " words per partition, not ", n);
    at::Tensor all = at::from_blob(state_.data(), {kLanes, words()}, at::kUInt32).narrow(0, 0, parts);
    if (mode == 3) {
      mem.write(*o, all.to(at::kLong));
    } else {
      all.copy_(mem.view(*o).reshape({parts, -1}).to(at::kLong).bitwise_and(0xFFFFFFFFll).to(at::kUInt32));
    }
    return;
  }
  at::Tensor out = at::empty({parts, n}, mode == 0 ? at::kLong : at::kFloat);
  for (int64_t p = 0; p < parts; ++p) {
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t bits = next(p, j % streams_);
      if (mode == 0)
        out.mutable_data_ptr<int64_t>()[p * n + j] = bits;
      else  // the top 24 bits: every value a float32 holds exactly, 1 excluded
        out.mutable_data_ptr<float>()[p * n + j] = static_cast<float>(bits >> 8) * 0x1p-24f;
    }
  }
  mem.write(*o, out);
}

// A program runs on one host thread but for its largest matmuls. Its steps are tile-sized, and an
// OpenMP team woken per step costs more than the step: libgomp stops spinning between regions once
// the host thread's team and a queue worker's together outnumber the cores, so each region waits
// for a futex wake-up. The OpenMP thread count is per thread; MKL follows it. Without OpenMP this
// does nothing.
class Threads {
 public:
  explicit Threads(int n) {
    if (api().set) {
      saved_ = api().get();
      api().set(n);
    }
  }
  ~Threads() {
    if (api().set) api().set(saved_);
  }
  int saved() const { return saved_; }

 private:
  struct Api {
    int (*get)() = nullptr;
    void (*set)(int) = nullptr;
  };
  static const Api& api() {
    static const Api a = [] {
      Api r;
      r.get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
      r.set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
      if (!r.get) r.set = nullptr;
      return r;
    }();
    return a;
  }
  int saved_ = 1;
};

// The tracer's flag (nki/_trace.py _apart): the step's destination is apart from its inputs.
bool direct_flag(const Step& s, size_t at) { return s.i.size() > at && s.i[at] != 0; }

bool same_view(const Operand& a, const Operand& b) {
  return a.space == b.space && a.index == b.index && a.dtype == b.dtype && a.byte_offset == b.byte_offset &&
         a.sizes == b.sizes && a.strides == b.strides;
}

// `t` as [P, n] rows whose elements are adjacent (a view of the same memory), or undefined.
at::Tensor dense_rows(const at::Tensor& t) {
  if (t.dim() == 0) return {};
  int64_t n = 1;
  for (int64_t d = t.dim() - 1; d >= 1; --d) {
    if (t.size(d) != 1 && t.stride(d) != n) return {};
    n *= t.size(d);
  }
  if (t.size(0) > 1 && t.stride(0) < n) return {};
  return t.as_strided({t.size(0), n}, {t.stride(0), 1});
}

// out[p, k] = rows[p, idx[p, k]], an index past its row an error (as the hardware's is undefined).
at::Tensor gather_rows(const at::Tensor& rows, const at::Tensor& idx) {
  TORCH_CHECK(idx.numel() == 0 || (idx.min().item<int64_t>() >= 0 && idx.max().item<int64_t>() < rows.size(1)),
              "nki: a gather index is outside its partition's ", rows.size(1), " elements");
  // ATen's CPU gather has no unsigned 16/32-bit kernel: move the same bits as the signed type.
  const at::ScalarType st = rows.scalar_type();
  const at::ScalarType as = st == at::kUInt32 ? at::kInt : st == at::kUInt16 ? at::kShort : st;
  return rows.view(as).gather(1, idx).view(st);
}

at::Tensor operand_or_scalar(Memory& mem, const Step& s, size_t which, bool scalar, double value, bool integral) {
  if (scalar) return integral ? at::scalar_tensor(static_cast<int64_t>(value), at::kLong) : at::scalar_tensor(value);
  at::Tensor t = mem.view(s.operands.at(which));
  return integral ? t : fp32(t);
}

// Steps this large take the thread team: they outlast its wake-up. (Multiply-adds of a matmul,
// elements written by any other step.)
constexpr int64_t kTeamMatmul = int64_t{1} << 23;
constexpr int64_t kTeamElements = int64_t{1} << 17;

int64_t numel(const Operand& o) {
  int64_t n = 1;
  for (auto v : o.sizes) n *= v;
  return n;
}

void execute(Memory& mem, const Step& s, int team) {
  const auto& o = s.operands;
  switch (s.op) {
    case kCopy:
      mem.write(o[0], mem.view(o[1]));
      return;
    case kFill:
      mem.view(o[0]).fill_(s.f[0]);
      return;
    case kActivate: {
      // One fp32 working copy, scaled, biased and activated in place: the destination itself where
      // it is an fp32 tile of the data's shape apart from the scale and bias operands.
      at::Tensor x;
      bool in_place = false;
      if (direct_flag(s, 3) && o[0].space != kReg && o[0].dtype == at::kFloat) {
        at::Tensor dst = mem.view(o[0]), src = mem.view(o[1]);
        if (src.sizes().equals(dst.sizes()) && direct::writable(dst)) {
          if (!same_view(o[0], o[1])) dst.copy_(src);
          x = dst;
          in_place = true;
        }
      }
      if (!x.defined()) x = mem.view(o[1]).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      size_t next = 2;
      if (s.i[1])
        x.mul_(mem.view(o[next++]));
      else if (s.f[0] != 1.0)
        x.mul_(s.f[0]);
      if (s.i[2])
        x.add_(mem.view(o[next++]));
      else if (s.f[1] != 0.0)
        x.add_(s.f[1]);
      at::Tensor r = activate(s.i[0], x);
      if (!in_place) {
        mem.write(o[0], r);
      } else if (!r.is_same(x)) {
        x.copy_(r);
      }
      return;
    }
    case kBinary: {
      // Integer tiles stay integral for bitwise, shift and integer arithmetic (GpSimd's int32 ALU).
      const bool a_scalar = s.i[1] != 0, b_scalar = s.i[2] != 0;
      const bool integral = s.i[3] != 0;
      size_t next = 1;
      // A register destination is a fresh fp32 tensor, apart from everything by construction.
      const bool to_reg = o[0].space == kReg;
      if (!integral && (to_reg || direct_flag(s, 4))) {
        const at::Tensor da = a_scalar ? at::scalar_tensor(s.f[0], at::kFloat) : mem.view(o[next]);
        const at::Tensor db = b_scalar ? at::scalar_tensor(s.f[1], at::kFloat) : mem.view(o[a_scalar ? 1 : 2]);
        const at::Tensor dst = to_reg ? at::empty(o[0].sizes, at::kFloat) : mem.view(o[0]);
        if (direct::binary(s.i[0], dst, da, db)) {
          if (to_reg) mem.write(o[0], dst);
          return;
        }
      }
      const at::Tensor a = operand_or_scalar(mem, s, a_scalar ? 0 : next++, a_scalar, s.f[0], integral);
      at::Tensor b = operand_or_scalar(mem, s, b_scalar ? 0 : next++, b_scalar, s.f[1], integral);
      // Two tiles of one size whose free dims are shaped apart meet element by element, in order.
      if (!b_scalar && !a_scalar && a.numel() == b.numel() && !a.sizes().equals(b.sizes())) b = b.reshape(a.sizes());
      mem.write(o[0], binary(s.i[0], a, b));
      return;
    }
    case kReduce: {
      at::Tensor r = reduce_trailing(s.i[0], fp32(mem.view(o[1])), s.i[2]);
      mem.write(o[0], s.i[1] ? r.neg() : r);
      return;
    }
    case kMatmul: {
      const at::Tensor dst = mem.view(o[0]), st = mem.view(o[1]), mv = mem.view(o[2]);
      const Threads threads(st.numel() * dst.size(-1) >= kTeamMatmul ? team : 1);
      if (dst.scalar_type() == at::kFloat) {
        matmul(dst, st, mv, s.i[0] != 0);
      } else {  // a bf16 PSUM destination (NeuronCore-v4): accumulate in fp32, then round
        at::Tensor acc = s.i[0] ? dst.to(at::kFloat) : at::zeros(dst.sizes(), at::kFloat);
        matmul(acc, st, mv, true);
        dst.copy_(acc);
      }
      return;
    }
    case kTranspose: {
      const at::Tensor src = mem.view(o[1]);
      mem.write(o[0], src.reshape({src.size(0), -1}).t());
      return;
    }
    case kWhere: {
      const at::Tensor cond = mem.view(o[1]), a = mem.view(o[2]);
      if (o.size() > 3) {  // two tiles of one dtype select bit-exactly; otherwise in fp32
        const at::Tensor b = mem.view(o[3]);
        const bool same = a.scalar_type() == b.scalar_type();
        mem.write(o[0], at::where(cond, same ? a : fp32(a), same ? b : fp32(b)));
        return;
      }
      mem.write(o[0], at::where(cond, fp32(a), at::scalar_tensor(s.f[0])));
      return;
    }
    case kTop8: {
      const at::Tensor src = fp32(mem.view(o[1]));
      mem.write(o[0], std::get<0>(src.reshape({src.size(0), -1}).topk(8, 1, /*largest=*/true, /*sorted=*/true)));
      return;
    }
    case kPartitionReduce: {
      const at::Tensor src = fp32(mem.view(o[1]));
      const at::Tensor flat = src.reshape({src.size(0), -1});
      at::Tensor r;
      switch (s.i[0]) {
        case 0:
          r = flat.sum(0, true);
          break;
        case 1:
          r = flat.amax(0, true);
          break;
        case 2:
          r = flat.amin(0, true);
          break;
        case 3:
          r = flat.prod(0, true);
          break;
        default:
          TORCH_CHECK(false, "nki: unknown reduction ", s.i[0]);
      }
      mem.write(o[0], r);
      return;
    }
    case kMatmulGroup: {
      const at::Tensor dst = mem.view(o[0]);
      std::vector<at::Tensor> stationary, moving;
      int64_t macs = 0;
      for (size_t i = 1; i + 1 < o.size(); i += 2) {
        const at::Tensor st = mem.view(o[i]), mv = mem.view(o[i + 1]);
        stationary.push_back(st.reshape({st.size(0), -1}));
        moving.push_back(mv.reshape({mv.size(0), -1}));
        macs += st.numel() * moving.back().size(1);
      }
      const Threads threads(macs >= kTeamMatmul ? team : 1);
      const at::Tensor r = at::mm(at::cat(stationary, 0).t(), at::cat(moving, 0));
      dst.view({r.size(0), r.size(1)}).copy_(r);
      return;
    }
    case kScan: {
      const at::Tensor init = s.i[4] ? mem.view(o[3]) : at::Tensor();  // undefined: the immediate f0
      at::Tensor rows;
      if (direct_flag(s, 5) && o[0].space != kReg && o[0].dtype == at::kFloat) rows = dense_rows(mem.view(o[0]));
      const at::Tensor r = scan(mem.view(o[1]), mem.view(o[2]), init, s, rows);
      if (!rows.defined()) mem.write(o[0], r);
      return;
    }
    case kFindIndex8: {
      // [P, 8, F] matches; argmax of the first match (a value absent from its partition gives the
      // largest uint32, as nothing matched).
      const at::Tensor data = fp32(mem.view(o[1])), vals = fp32(mem.view(o[2]));
      const at::Tensor hit = data.reshape({data.size(0), 1, -1}).eq(vals.reshape({vals.size(0), -1, 1}));
      const at::Tensor first = hit.to(at::kByte).argmax(2);
      mem.write(o[0], at::where(hit.any(2), first, at::scalar_tensor(int64_t{0xFFFFFFFF}, at::kLong)));
      return;
    }
    case kGather: {
      const at::Tensor data = mem.view(o[1]), index = mem.view(o[2]);
      mem.write(o[0], gather_rows(data.reshape({data.size(0), -1}), index.reshape({index.size(0), -1}).to(at::kLong)));
      return;
    }
    case kLocalGather: {
      // Each GpSimd core's indices: its 16 partitions' index columns in turn, partition first, the
      // first i1 of them; each of its partitions reads those i0-element runs of its own row.
      const at::Tensor data = mem.view(o[1]), index = mem.view(o[2]);
      const int64_t parts = data.size(0), each = s.i[0], valid = s.i[1];
      const at::Tensor idx = index.reshape({parts, -1}).to(at::kLong);
      std::vector<at::Tensor> cores;
      for (int64_t c = 0; c < parts / 16; ++c) {
        cores.push_back(idx.narrow(0, c * 16, 16).t().reshape({1, -1}).narrow(1, 0, valid).expand({16, valid}));
      }
      const at::Tensor at_runs = at::cat(cores, 0).unsqueeze(2) + at::arange(each, at::kLong);
      mem.write(o[0], gather_rows(data.reshape({parts, -1}), at_runs.reshape({parts, valid * each})));
      return;
    }
    case kNonzero: {  // a compaction: one pass along each partition's row
      const at::Tensor src = fp32(mem.view(o[1])).reshape({mem.view(o[1]).size(0), -1}).contiguous();
      const int64_t parts = src.size(0), t = src.size(1);
      at::Tensor out = at::full({parts, t + 1}, s.f[1], at::kDouble);
      const float* ps = src.const_data_ptr<float>();
      double* po = out.mutable_data_ptr<double>();
      for (int64_t p = 0; p < parts; ++p) {
        int64_t n = 0;
        for (int64_t j = 0; j < t; ++j) {
          if (ps[p * t + j] != 0.0f) po[p * (t + 1) + n++] = static_cast<double>(j) + s.f[0];
        }
        po[p * (t + 1) + t] = static_cast<double>(n);
      }
      mem.write(o[0], out);
      return;
    }
    case kMatchReplace8: {
      at::Tensor data = fp32(mem.view(o[1])).reshape({mem.view(o[1]).size(0), -1}).contiguous().clone();
      const at::Tensor vals = fp32(mem.view(o[2])).reshape({data.size(0), -1}).contiguous();
      at::Tensor idx = at::full({data.size(0), vals.size(1)}, int64_t{0xFFFFFFFF}, at::kLong);
      float* pd = data.mutable_data_ptr<float>();
      const float* pv = vals.const_data_ptr<float>();
      int64_t* pi = idx.mutable_data_ptr<int64_t>();
      const int64_t n = data.size(1), k = vals.size(1);
      const float imm = static_cast<float>(s.f[0]);
      for (int64_t p = 0; p < data.size(0); ++p) {
        for (int64_t j = 0; j < k; ++j) {
          float* row = pd + p * n;
          const float* hit = std::find(row, row + n, pv[p * k + j]);
          if (hit == row + n) continue;
          pi[p * k + j] = hit - row;
          row[hit - row] = imm;
        }
      }
      mem.write(o[0], data);
      if (o.size() > 3) mem.write(o[3], idx);
      return;
    }
    case kRng:
      mem.rng(s.i[0]).step(s.i[1], mem, o.empty() ? nullptr : &o[0]);
      return;
    case kOffsetCopy: {  // one transfer per run-time offset (the DMA's descriptors)
      const at::Tensor index = mem.view(o[2]).reshape({-1}).to(at::kLong);
      const int64_t side = s.i[0], dim = s.i[2];
      for (int64_t r = 0; r < index.numel(); ++r) {
        const int64_t v = index[r].item<int64_t>();
        if ((v < s.i[3] || v > s.i[4]) && s.i[5] != 0) continue;  // oob_mode=skip
        TORCH_CHECK(
            v >= s.i[3] && v <= s.i[4], "nki: a DMA's ",
            dim >= 0 ? "vector_offset entry " + std::to_string(r) : std::string("run-time offset (scalar_offset=)"),
            " read ", v, " from SBUF; the access stays inside its tensor for ", s.i[3], "..", s.i[4]);
        Operand moved = o[side];
        moved.byte_offset += v * s.i[1];
        at::Tensor there = mem.view(moved), here = mem.view(o[1 - side]);
        if (dim >= 0) there = there.select(dim, r), here = here.select(dim, r);
        if (side == 0) {
          there.copy_(here.sizes().equals(there.sizes()) ? here : here.reshape(there.sizes()));
        } else {
          here.copy_(there.sizes().equals(here.sizes()) ? there : there.reshape(here.sizes()));
        }
      }
      return;
    }
    case kPrint: {
      const at::Tensor text = mem.view(o[1]);
      std::ostringstream values;
      values << mem.view(o[0]);
      std::string shown = values.str();  // less ATen's closing "[ CPUFloatType{...} ]" line
      shown = shown.substr(0, shown.rfind("\n[ "));
      const std::string prefix(static_cast<const char*>(text.const_data_ptr()), static_cast<size_t>(s.i[0]));
      std::fputs((prefix + "\n" + shown + "\n").c_str(), stdout);
      std::fflush(stdout);
      return;
    }
    default:
      TORCH_CHECK(false, "nki: unknown step ", s.op);
  }
}

}  // namespace

namespace {
int64_t next_serial() {
  static std::atomic<int64_t> serial{0};
  return ++serial;
}
}  // namespace

Program::Program(std::string name, std::vector<Step> steps, std::vector<at::Tensor> constants, int64_t sbuf_row,
                 int64_t psum_row, int registers, std::vector<Io> io)
    : name_(std::move(name)),
      task_name_("nki::" + name_),
      serial_(next_serial()),
      steps_(std::move(steps)),
      constants_(std::move(constants)),
      sbuf_row_(sbuf_row),
      psum_row_(psum_row),
      registers_(registers),
      io_(std::move(io)) {}

void Program::run(const std::vector<at::Tensor>& hbm) const {
  const Threads one(1);
  Memory mem(hbm, constants_, sbuf_row_, psum_row_, registers_);
  for (const Step& s : steps_) {
    // A step's work is its largest operand's (a reduction reads more than it writes). A scan's
    // loop costs several times a copy's per element: its team pays off on smaller tiles.
    const int64_t team_at = s.op == kScan ? kTeamElements / 8 : kTeamElements;
    int64_t largest = 0;
    for (const Operand& o : s.operands) largest = std::max(largest, numel(o));
    const bool big = s.op != kMatmul && largest >= team_at;
    const Threads threads(big ? one.saved() : 1);
    execute(mem, s, one.saved());
  }
}

void Program::launch(c10::DeviceIndex device, OpRecord& rec, std::vector<TensorDesc> io, size_t inputs,
                     const char* task) const {
  // A program whose tensors are not these (in elements or dtype) would write memory it does not own.
  TORCH_CHECK(io_.size() == io.size(), "nki: ", name_, " takes ", io_.size(), " tensors; ", rec.name, " has ",
              io.size());
  for (size_t i = 0; i < io.size(); ++i) {
    int64_t n = 1;
    for (auto v : io[i].sizes) n *= v;
    TORCH_CHECK(io_[i].numel == n && io_[i].dtype == io[i].dtype, "nki: tensor ", i, " of ", name_, " is ",
                io_[i].numel, " ", c10::toString(io_[i].dtype), "; ", rec.name, " has ", n, " ",
                c10::toString(io[i].dtype));
  }
  rec.count(Mode::kAsync);
  torch_neuronx::launch(device, task ? task : rec.name.c_str(),
                        [self = shared_from_this(), io = std::move(io), inputs] {
                          std::vector<at::Tensor> views;
                          views.reserve(io.size());
                          for (size_t i = 0; i < io.size(); ++i) {
                            at::Tensor v = io[i].view();
                            views.push_back(i < inputs && !v.is_contiguous() ? v.contiguous() : v);
                          }
                          self->run(views);
                        });
}

void Program::launch(const std::vector<at::Tensor>& hbm) const {
  DeviceCheck check(name_.c_str());
  std::vector<TensorDesc> io;
  io.reserve(hbm.size());
  for (const at::Tensor& t : hbm) {
    TORCH_CHECK(is_neuron(t), "nki: kernel ", name_, " was given a tensor on ", t.device(),
                "; a kernel launched on neuron takes neuron tensors only");
    check.add(t, /*written=*/true);
    io.push_back(TensorDesc::of(t));
  }
  const size_t n = io.size();
  // The launch is a host op of its own for profilers; its note (the serial) finds the kernel's
  // instruction-level estimate.
  RECORD_FUNCTION(task_name_, std::vector<c10::IValue>{c10::IValue(serial_)});
  launch(check.device() >= 0 ? check.device() : current_device(), kernel_rec, std::move(io), n, task_name_.c_str());
}

const std::vector<std::string>& Program::activation_names() { return kActivations; }
const std::vector<std::string>& Program::binary_names() { return kBinaries; }
const std::vector<std::string>& Program::reduce_names() { return kReductions; }

}  // namespace torch_neuronx::nki
