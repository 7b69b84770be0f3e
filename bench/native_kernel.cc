// The native CPU forward kernels alone, without JAX around them: LayerNorm and RMSNorm rows
// (scale, and bias for LayerNorm) against an elementwise copy (y = -x) over the same buffers,
// in GB/s (read x, write y). Built and run by bench/native_kernel.sh.
//
//   native_kernel ELEMENTS REPS [XBUFS [YBUFS]]
//     e.g. 65536 300 (in cache), 1048576 40 32 2 (x from memory, y reused, as in jln bench),
//     16777216 21 (x and y from memory)
//
// Each call reads the next of XBUFS input buffers and writes the next of YBUFS output buffers
// (default 1 each). Buffers are 64-byte aligned, as JAX's CPU buffers are (16-byte aligned
// ones split every 64-byte vector load across two cache lines: LayerNorm in cache ran at
// 0.64-0.99x of its speed on aligned ones, measured).
#include "../jln/kernels/cpu_norm.cc"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace {

struct Aligned {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char[], Aligned>;

Buffer aligned_buffer(size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) {
    std::fprintf(stderr, "native_kernel: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  return Buffer(static_cast<char*>(p));
}

template <int K>
void case_(int64_t n, int64_t total, int reps, int xbufs, int ybufs) {
  const int64_t rows = std::max<int64_t>(1, total / n);
  const size_t bytes = size_t(rows * n) * (K == kF32 ? 4 : 2);
  std::vector<Buffer> xs, ys;
  for (int i = 0; i < xbufs; ++i) {
    xs.push_back(aligned_buffer(bytes));
    // values near 1 (exponent byte 0x3f), random low bits: no NaN, no subnormals
    for (size_t k = 0; k < bytes; k += 2) {
      xs.back()[k] = char(std::rand());
      xs.back()[k + 1] = char(0x3f);
    }
  }
  for (int i = 0; i < ybufs; ++i) {
    ys.push_back(aligned_buffer(bytes));
    std::memset(ys.back().get(), 0, bytes);
  }
  char* x = nullptr;
  char* y = nullptr;
  // the parameter rows 64-byte aligned as well (as std::vectors, 16-byte aligned, LayerNorm in
  // cache ran 0.77x at 1024 wide: its scale and bias loads split cache lines)
  Buffer wbuf = aligned_buffer(size_t(n) * 4), bbuf = aligned_buffer(size_t(n) * 4);
  float* w = reinterpret_cast<float*>(wbuf.get());
  float* b = reinterpret_cast<float*>(bbuf.get());
  std::fill(w, w + n, 1.0f);
  std::fill(b, b + n, 0.0f);
  std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  Config c{};
  c.eps = 1e-5f;
  c.rows = rows;
  c.n = n;
  for (int k = 0; k < kParams; ++k) c.per[k] = rows;
  Params P{};
  P.p[kW] = w;
  P.p[kB] = b;
  Src in{nullptr, nullptr, nullptr};
  // the three are sampled in turns (copy, layer_norm, rms_norm per round), so a machine whose
  // speed drifts shifts them alike; each reports its median
  auto run_ln = [&] {
    c.center = true;
    c.has[kW] = c.has[kB] = true;
    fwd_rows_any<K, K, false>(c, in, P, y, mean.data(), rstd.data(), 0, rows);
  };
  auto run_rms = [&] {
    c.center = false;
    c.has[kW] = true;
    c.has[kB] = false;
    fwd_rows_any<K, K, false>(c, in, P, y, mean.data(), rstd.data(), 0, rows);
  };
  auto run_copy = [&] {
    for (int64_t i = 0; i + V <= rows * n; i += V) vstore<K>(y, i, -vload<K>(x, i));
  };
  std::vector<double> t[3];
  int64_t call = 0;
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < 3; ++k) {
      x = xs[size_t(call % xbufs)].get();
      y = ys[size_t(call % ybufs)].get();
      in.x = x;
      ++call;
      const auto t0 = std::chrono::steady_clock::now();
      if (k == 0) run_copy();
      if (k == 1) run_ln();
      if (k == 2) run_rms();
      t[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  double gb[3];
  for (int k = 0; k < 3; ++k) {
    std::sort(t[k].begin(), t[k].end());
    gb[k] = 2.0 * double(bytes) / t[k][t[k].size() / 2] / 1e9;
  }
  const double copy = gb[0], ln = gb[1], rms = gb[2];
  std::printf("| %ld | %s | %.1f | %.1f (%.0f%%) | %.1f (%.0f%%) |\n", long(n), K == kF32 ? "float32" : "bfloat16",
              copy, ln, 100 * ln / copy, rms, 100 * rms / copy);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t total = argc > 1 ? std::atoll(argv[1]) : 65536;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 300;
  const int xbufs = std::max(1, argc > 3 ? std::atoi(argv[3]) : 1);
  const int ybufs = std::max(1, argc > 4 ? std::atoi(argv[4]) : 1);
  std::printf("| width | dtype | copy GB/s | layer_norm GB/s (%% copy) | rms_norm GB/s (%% copy) |\n|---|---|---|---|---|\n");
  for (int64_t n : {256, 1024, 4096, 16384}) {
    case_<kF32>(n, total, reps, xbufs, ybufs);
    case_<kBF16>(n, total, reps, xbufs, ybufs);
  }
}
