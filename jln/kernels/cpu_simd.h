// jln's native CPU kernels: what every kernel source shares. float32 <-> bfloat16/float16
// conversions (scalar and 16 lanes), rounding steps, fixed-order row sums, and the row loop
// on XLA's intra-op thread pool. Included by cpu_norm.cc (LayerNorm, RMSNorm) and
// cpu_gated.cc (gated RMSNorm); see cpu_norm.cc for how `jln build` compiles them.
#ifndef JLN_CPU_SIMD_H_
#define JLN_CPU_SIMD_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
#if defined(__AVX512BF16__) && defined(__AVX512VL__)
#define JLN_AVX512_BF16 1
#endif
#endif

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// Inlining: the row passes stay functions of their own (JLN_NOINLINE; inlined into one row
// loop they ran 5-15% slower on short rows, measured), and a few steps inside their loops are
// forced inline (JLN_INLINE) where the compiler would call them.
#if defined(__GNUC__)
#define JLN_NOINLINE __attribute__((noinline))
#define JLN_INLINE __attribute__((always_inline))
#else
#define JLN_NOINLINE
#define JLN_INLINE
#endif

// One translation unit, or (JLN_SPLIT, how jln/kernels/_cpu_build.py builds it) several compiled in
// parallel and linked into one library: the part with JLN_MAIN holds the FFI handlers, and
// the part with JLN_KX and JLN_KY the bodies of one (x dtype, y dtype) pair's forward and
// backward. Split, the kernels live in a named namespace of hidden visibility (the parts call
// each other, and the library exports only the handlers); whole, in an anonymous one.

// One translation unit, or (JLN_SPLIT, how jln/kernels/_cpu_build.py builds it) several compiled in
// parallel and linked into one library. Split, the shared kernels live in a named namespace of
// hidden visibility (the parts call each other, and the library exports only the handlers);
// whole, in an anonymous one. JLN_NAMESPACE opens it.
#ifdef JLN_SPLIT
#define JLN_NAMESPACE namespace __attribute__((visibility("hidden"))) jln_cpu
#else
#define JLN_NAMESPACE namespace
#endif

JLN_NAMESPACE {

enum Kind : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// float32 -> bfloat16 bits, round to nearest even; NaN stays NaN (quieted).
inline uint16_t to_bf16(float v) {
  const uint32_t u = float_to_bits(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

template <int K>
inline float load(const void* p, int64_t i) {
  if constexpr (K == kF32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (K == kBF16) {
    return bits_to_float(uint32_t(static_cast<const uint16_t*>(p)[i]) << 16);
  } else {
    return float(static_cast<const _Float16*>(p)[i]);
  }
}

template <int K>
inline void store(void* p, int64_t i, float v) {
  if constexpr (K == kF32) {
    static_cast<float*>(p)[i] = v;
  } else if constexpr (K == kBF16) {
    static_cast<uint16_t*>(p)[i] = to_bf16(v);
  } else {
    static_cast<_Float16*>(p)[i] = _Float16(v);
  }
}

// ---- 16-lane vectors (GCC/Clang vector extensions: the compiler picks AVX-512, AVX2, SSE or
// NEON). Explicit vectors let one loop fuse load, arithmetic, rounding and store.
constexpr int V = 16;
typedef float vf __attribute__((vector_size(64)));
typedef uint32_t vu __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));
typedef uint16_t vh __attribute__((vector_size(32)));
typedef _Float16 vhf __attribute__((vector_size(32)));

// float16 bits <-> float32 for 16 lanes, round to nearest even: the CPU's conversions where it
// has them (AVX-512F, or F16C in 8-lane halves). GCC 12 converts a _Float16 vector one element
// at a time, and float16 LayerNorm forwards ran 1.7x slower than the XLA path (4096 wide, one
// CPU core).
inline vf vhalf_to_f32(vh h) {
#if defined(__AVX512F__)
  return reinterpret_cast<vf>(_mm512_cvtph_ps(reinterpret_cast<__m256i>(h)));
#elif defined(__F16C__) && defined(__AVX__)
  const __m256i b = reinterpret_cast<__m256i>(h);
  const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(b)), hi = _mm256_cvtph_ps(_mm256_extractf128_si256(b, 1));
  vf v;
  std::memcpy(&v, &lo, sizeof(lo));
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof(lo), &hi, sizeof(hi));
  return v;
#else
  return __builtin_convertvector(reinterpret_cast<vhf>(h), vf);
#endif
}
inline vh vf32_to_half(vf v) {
#if defined(__AVX512F__)
  return reinterpret_cast<vh>(_mm512_cvtps_ph(reinterpret_cast<__m512>(v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__) && defined(__AVX__)
  __m256 lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  const __m128i a = _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m128i b = _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return reinterpret_cast<vh>(_mm256_set_m128i(b, a));
#else
  return reinterpret_cast<vh>(__builtin_convertvector(v, vhf));
#endif
}

// float32 -> bfloat16 bits for 16 lanes, as to_bf16 (software).
inline vh vbf16(vf v) {
  const vu u = reinterpret_cast<vu>(v);
  const vu rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const vu nan = reinterpret_cast<vu>((u & 0x7FFFFFFFu) > 0x7F800000u);  // all-ones where NaN
  return __builtin_convertvector((rounded & ~nan) | (((u >> 16) | 0x40u) & nan), vh);
}

// float32 -> bfloat16 bits for 16 lanes, as vbf16: the CPU's round-to-nearest-even conversion
// where it has one (AVX512-BF16); it flushes float32 subnormal inputs to zero, so a vector
// holding any takes vbf16's exact rounding instead
inline vh vf32_to_bf16(vf v) {
#ifdef JLN_AVX512_BF16
  const __m512 m = reinterpret_cast<__m512>(v);
  if (__builtin_expect(_mm512_fpclass_ps_mask(m, 0x20) == 0, 1)) return reinterpret_cast<vh>(_mm512_cvtneps_pbh(m));
#endif
  return vbf16(v);
}

// bfloat16 bits -> float32 for 16 lanes (exact). With AVX-512 one zero-extension and a shift:
// the generic conversion compiles to two 8-lane halves, extracted and re-inserted (measured
// 2-10% slower for a whole forward).
inline vf vbf16_to_f32(vh h) {
#if defined(__AVX512F__)
  return reinterpret_cast<vf>(_mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<__m256i>(h)), 16));
#else
  return reinterpret_cast<vf>(__builtin_convertvector(h, vu) << 16);
#endif
}

// A half type's (K: bfloat16 or float16) 16 lanes of bits from float32 (rounded to nearest
// even) and back (exact).
template <int K>
inline vh vnarrow(vf v) {
  return K == kBF16 ? vf32_to_bf16(v) : vf32_to_half(v);
}
template <int K>
inline vf vwiden(vh h) {
  return K == kBF16 ? vbf16_to_f32(h) : vhalf_to_f32(h);
}

template <int K>
inline vf vload(const void* p, int64_t i) {
  if constexpr (K == kF32) {
    vf v;
    std::memcpy(&v, static_cast<const float*>(p) + i, sizeof(v));
    return v;
  } else {
    vh h;
    std::memcpy(&h, static_cast<const uint16_t*>(p) + i, sizeof(h));
    return vwiden<K>(h);
  }
}

template <int K>
inline void vstore(void* p, int64_t i, vf v) {
  if constexpr (K == kF32) {
    std::memcpy(static_cast<float*>(p) + i, &v, sizeof(v));
  } else {
    const vh h = vnarrow<K>(v);
    std::memcpy(static_cast<uint16_t*>(p) + i, &h, sizeof(h));
  }
}

// Stores a float32 row as y's dtype (vstore's rounding, then the scalar tail).
template <int K>
inline void store_row(void* y, int64_t o, const float* h, int64_t n) {
  int64_t j = 0;
  for (; j + V <= n; j += V) vstore<K>(y, o + j, vload<kF32>(h, j));
  for (; j < n; ++j) store<K>(y, o + j, h[j]);
}

// round each lane to bfloat16 (k = 1) or float16 (k = 2) precision, kept in float32
inline vf vround(vf v, int k) {
  if (k == kBF16) {
#ifdef JLN_AVX512_BF16
    return vbf16_to_f32(vf32_to_bf16(v));
#else
    // in the 32-bit lanes (no narrowing): to_bf16's rounding, low half cleared
    const vu u = reinterpret_cast<vu>(v);
    const vu rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    const vu nan = reinterpret_cast<vu>((u & 0x7FFFFFFFu) > 0x7F800000u);
    return reinterpret_cast<vf>((rounded & ~nan) | ((u | 0x00400000u) & 0xFFFF0000u & nan));
#endif
  }
  if (k == kF16) return vhalf_to_f32(vf32_to_half(v));
  return v;
}

// vround(v, K) stored at element i of p (K's dtype) and returned: one conversion serves both
// (the residual step's s; vround then vstore converted twice)
template <int K>
inline vf vround_store(void* p, int64_t i, vf v) {
  if constexpr (K == kF32) {
    vstore<kF32>(p, i, v);
    return v;
  } else {
    const vh h = vnarrow<K>(v);
    std::memcpy(static_cast<uint16_t*>(p) + i, &h, sizeof(h));
    return vwiden<K>(h);
  }
}

// the scalar vround: v rounded to bfloat16 (k = 1) or float16 (k = 2) precision, as float32
inline float round1(float v, int k) {
  if (k == kBF16) return bits_to_float(uint32_t(to_bf16(v)) << 16);
  if (k == kF16) return float(_Float16(v));
  return v;
}

typedef float vf8 __attribute__((vector_size(32)));
typedef float vf4 __attribute__((vector_size(16)));

// pairwise over the 16 lanes in a fixed order (lane l with l + 8, then l + 4, ...): deterministic.
// With AVX-512 the halves are taken in registers, in the same order (the same bits). Through
// memory, GCC 12 spilled the vector and reloaded its upper half, a store-to-load forwarding
// stall at the end of every row sum. With stats_first's out-parameter, 256-wide bfloat16 rows
// run 1.12-1.15x faster in cache (bench/native_kernel.cc, 3 alternating runs, one CPU core;
// 1.25-1.35x for the half types timed 20 calls at a time), float32 ones 1.05x.
inline float hsum(vf v) {
#if defined(__AVX512F__)
  const __m512 z = reinterpret_cast<__m512>(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1));
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(z), hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 t = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // s4[0] + s4[2], s4[1] + s4[3]
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
#else
  vf8 a, b;
  std::memcpy(&a, &v, sizeof(a));
  std::memcpy(&b, reinterpret_cast<const char*>(&v) + sizeof(a), sizeof(b));
  const vf8 s8 = a + b;
  vf4 c, d;
  std::memcpy(&c, &s8, sizeof(c));
  std::memcpy(&d, reinterpret_cast<const char*>(&s8) + sizeof(c), sizeof(d));
  const vf4 s4 = c + d;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
#endif
}

// sum over j < n of f(j) (f returns a vf for lanes j..j+15) plus tail(j) for the last n % 16;
// four independent vector accumulators, combined in a fixed order.
template <typename F, typename T>
inline float vsum(int64_t n, F f, T tail) {
  vf a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t j = 0;
  for (; j + 4 * V <= n; j += 4 * V) {
    a0 += f(j);
    a1 += f(j + V);
    a2 += f(j + 2 * V);
    a3 += f(j + 3 * V);
  }
  for (; j + V <= n; j += V) a0 += f(j);
  float t = 0;
  for (; j < n; ++j) t += tail(j);
  return hsum((a0 + a1) + (a2 + a3)) + t;
}

// a * b + c rounded once where the CPU has FMA: only inside row sums, whose float32 order
// already differs from XLA's; every elementwise output step keeps its own rounding
inline vf vfma(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  return reinterpret_cast<vf>(_mm512_fmadd_ps(reinterpret_cast<__m512>(a), reinterpret_cast<__m512>(b),
                                              reinterpret_cast<__m512>(c)));
#else
  return a * b + c;
#endif
}

// sum over j < n of f(j) * f(j) (f as for vsum; tail(j) the scalar square), with fused
// multiply-adds and four independent accumulators
template <typename F, typename T>
inline float vsumsq(int64_t n, F f, T tail) {
  vf a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t j = 0;
  for (; j + 4 * V <= n; j += 4 * V) {
    const vf d0 = f(j), d1 = f(j + V), d2 = f(j + 2 * V), d3 = f(j + 3 * V);
    a0 = vfma(d0, d0, a0);
    a1 = vfma(d1, d1, a1);
    a2 = vfma(d2, d2, a2);
    a3 = vfma(d3, d3, a3);
  }
  for (; j + V <= n; j += V) {
    const vf d = f(j);
    a0 = vfma(d, d, a0);
  }
  float t = 0;
  for (; j < n; ++j) t += tail(j);
  return hsum((a0 + a1) + (a2 + a3)) + t;
}

// Hints element `at` of an array of dtype K into the L2 cache, for reading (W = false) or
// writing (W = true: the line is fetched for ownership ahead of the store). Prefetches never
// fault, so hinting past the end of an array is harmless. Inlined by force (see cpu_norm.cc's
// prefetch_src: GCC 12 deleted calls from forced-inline lambdas).
template <int K, bool W>
JLN_INLINE inline void prefetch(const void* p, int64_t at) {
  __builtin_prefetch(static_cast<const char*>(p) + at * (K == kF32 ? 4 : 2), W ? 1 : 0, 2);
}

// How many workers a call may use: the intra-op pool's threads, at most `threads` (0: all).
inline int64_t pool_workers(ffi::ThreadPool& pool, int64_t threads) {
  const int64_t pool_size = std::max<int64_t>(1, pool.num_threads());
  return threads > 0 ? std::min<int64_t>(pool_size, threads) : pool_size;
}

// Runs body(r0, r1, slot) over row chunks on XLA's intra-op thread pool (the caller works
// too, so it finishes even when no pool thread is free). `slot` is a worker index < workers.
template <typename Body>
void parallel_rows(ffi::ThreadPool& pool, int64_t rows, int64_t n, int64_t workers, Body body) {
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(n, 1));
  const int64_t nchunks = (rows + chunk - 1) / chunk;
  workers = std::max<int64_t>(1, std::min(workers, nchunks));
  if (workers == 1) {
    body(0, rows, 0);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0}, done{0}, slot{0};
  };
  auto st = std::make_shared<State>();
  auto work = [st, chunk, nchunks, rows, body]() {
    const int64_t s = st->slot.fetch_add(1);
    int64_t k;
    while ((k = st->next.fetch_add(1)) < nchunks) {
      const int64_t r0 = k * chunk;
      body(r0, std::min(rows, r0 + chunk), s);
      st->done.fetch_add(1, std::memory_order_acq_rel);
    }
  };
  for (int64_t t = 1; t < workers; ++t) pool.Schedule(std::function<void()>(work));
  work();
  while (st->done.load(std::memory_order_acquire) < nchunks) std::this_thread::yield();
}

inline int kind_of(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32:
      return kF32;
    case ffi::DataType::BF16:
      return kBF16;
    case ffi::DataType::F16:
      return kF16;
    default:
      return -1;
  }
}

}  // namespace

#endif  // JLN_CPU_SIMD_H_
