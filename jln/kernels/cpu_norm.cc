// jln's native CPU kernels: LayerNorm and RMSNorm rows, forward and backward, as XLA FFI
// handlers. Built ahead of time by `jln build` (jln/kernels/_cpu_build.py) with the system C++ compiler.
//
// Contract (the same as jln._layer_norm.ln_body / jln._rms_norm.rms_body without modulation,
// which jln's tests compare these kernels against):
//   x [rows, n] in float32, bfloat16 or float16; statistics in float32. With the fused
//   residual step (add_*_norm), x is s = round(x + residual) in x's dtype (which the residual
//   and s share), computed and written by the kernel as it reads x and the residual.
//   center (LayerNorm): p = x[0] (the row's pivot), hi = p + sum(x - p) / n (the mean
//                       rounded to one float), e = x - hi, c = sum(e) / n (its residual),
//                       d = e - c, var = max(sum(e * e) / n - c * c, 0) (the corrected
//                       two-pass variance), rstd = 1 / sqrt(var + eps), h = d * rstd; x - hi
//                       rounds at the scale of |x - mean|, so values near the mean keep
//                       their digits. The saved statistic is hi (as jln's XLA path saves
//                       it), and the backward recomputes c from x.
//   no center (RMS):    rstd = 1 / sqrt(sum(x * x) / n + eps), h = x * rstd.
//   then h -> round(h, round_h) -> * (gemma ? 1 + w : w) -> round(., round_y) -> + b
//        -> round(., round_b) -> * f -> round(., round_f) -> + shift -> round(., round_s)
//        -> stored in y's dtype (round-to-nearest-even), where f = round(offset + mscale,
//        round_m) is adaptive LayerNorm's modulation factor (torch's `1 + scale`).
//   round(v, k) rounds a float32 to bfloat16 (k = 1) or float16 (k = 2) precision and keeps
//   it in float32, as one rounding step of an eager framework; k = 0 leaves v alone.
//   Each parameter (scale w, bias b, shift, mscale) arrives as [groups, n] in its own dtype
//   (float32, bfloat16 or float16; widened to float32 exactly), groups
//   counted per parameter: rows are split into `groups` equal, consecutive blocks and block g
//   uses parameter row g (groups = 1: one vector for all rows; groups = batch: per example).
//
// Backward, for a cotangent ct of y (reverse mode of the contract above; every rounding step
// is straight-through and rounds the cotangent passing through it, as JAX's
// reduce_precision transpose does):
//   c = round(ct, round_s); dshift = sum(c); c = round(c, round_f); dmscale = sum(c * yb)
//   (yb: the forward's value after round_b); c = round(c * f, round_b); db = sum(c);
//   c = round(c, round_y); dw = sum(c * round(h, round_h)); g = round(c * w_eff, round_h);
//   dx = rstd * (g - [center] mean(g) - h * mean(h * g)), stored in x's dtype.
// Parameter gradients accumulate in float64 per thread and are returned as float32.

#include "cpu_simd.h"

// One translation unit, or (JLN_SPLIT, how jln/kernels/_cpu_build.py builds it) several compiled in
// parallel and linked into one library with cpu_gated.cc: the part with JLN_MAIN holds the FFI
// handlers, and the part with JLN_KX and JLN_KY the bodies of one (x dtype, y dtype) pair's
// forward and backward (JLN_NAMESPACE: see cpu_simd.h).
JLN_NAMESPACE {

// vsum (SQ = false) or vsumsq (SQ = true) of two rows at once, each in the one-row order
// (so each row's sum is bit for bit the one-row sum): f(j, k) returns row k's lanes j..j+15,
// tail(j, k) row k's scalar term (squared already for SQ). The two rows' accumulations are
// independent chains, so the two rows' reductions overlap (see pipe_rows).
template <bool SQ, typename F, typename T>
inline void vsums2(int64_t n, F f, T tail, float* sums) {
  auto acc = [](vf& a, vf d) { a = SQ ? vfma(d, d, a) : a + d; };
  vf a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
  int64_t j = 0;
  for (; j + 4 * V <= n; j += 4 * V) {
    acc(a0, f(j, 0));
    acc(b0, f(j, 1));
    acc(a1, f(j + V, 0));
    acc(b1, f(j + V, 1));
    acc(a2, f(j + 2 * V, 0));
    acc(b2, f(j + 2 * V, 1));
    acc(a3, f(j + 3 * V, 0));
    acc(b3, f(j + 3 * V, 1));
  }
  for (; j + V <= n; j += V) {
    acc(a0, f(j, 0));
    acc(b0, f(j, 1));
  }
  float t0 = 0, t1 = 0;
  for (; j < n; ++j) {
    t0 += tail(j, 0);
    t1 += tail(j, 1);
  }
  sums[0] = hsum((a0 + a1) + (a2 + a3)) + t0;
  sums[1] = hsum((b0 + b1) + (b2 + b3)) + t1;
}

// The sums over j < n of e = f(j, k) and of e * e for NR rows at once (s[k], q[k]; tail(j, k)
// row k's scalar e), two accumulator pairs per row and each row in the same order whatever
// NR, so a row's sums are bit for bit the same alone or in a pair: LayerNorm's second pass
// (stats_second), the residual of the rounded mean and the variance in one sweep.
template <int NR, typename F, typename T>
inline void vsums_sq(int64_t n, F f, T tail, float* s, float* q) {
  vf a[NR][2] = {}, b[NR][2] = {};
  int64_t j = 0;
  for (; j + 2 * V <= n; j += 2 * V) {
    for (int k = 0; k < NR; ++k) {
      const vf e0 = f(j, k), e1 = f(j + V, k);
      a[k][0] += e0;
      b[k][0] = vfma(e0, e0, b[k][0]);
      a[k][1] += e1;
      b[k][1] = vfma(e1, e1, b[k][1]);
    }
  }
  for (; j + V <= n; j += V) {
    for (int k = 0; k < NR; ++k) {
      const vf e = f(j, k);
      a[k][0] += e;
      b[k][0] = vfma(e, e, b[k][0]);
    }
  }
  float ts[NR] = {}, tq[NR] = {};
  for (; j < n; ++j) {
    for (int k = 0; k < NR; ++k) {
      const float e = tail(j, k);
      ts[k] += e;
      tq[k] += e * e;
    }
  }
  for (int k = 0; k < NR; ++k) {
    s[k] = hsum(a[k][0] + a[k][1]) + ts[k];
    q[k] = hsum(b[k][0] + b[k][1]) + tq[k];
  }
}

// A forward's input rows: x alone, or (the fused residual step of add_*_norm) s = x + r,
// added in float32, rounded to x's dtype (which r and s share) and written to `s` by the first
// pass that reads it, so s costs one read of x and r and one write.
struct Src {
  const void* x;
  const void* r;  // nullptr: no residual step
  void* s;
};

// (prefetch<K, W>, which hints an element into the L2 cache, is cpu_simd.h's.) The two below are
// inlined by force: called from a lambda that is itself forced inline, GCC 12 deleted the calls
// (the pipeline's sweeps lost every prefetch, 946 -> 230 in one part of the library).
// A forward spreads its memory traffic over a row's passes (call these once per 16 elements,
// at the offset one row ahead): the first pass hints the next row of its sources (x, and the
// residual), the output sweep the next row of its destinations (y, and s with the residual
// step) for writing. Alone, the hardware prefetcher leaves the memory stream idle during a
// row's arithmetic, and every store to a line not yet owned waits for it (measured on one
// CPU core, data beyond L2: +0-30% per width over hinting only x during the output sweep).
template <int KX, bool ADD>
JLN_INLINE inline void prefetch_src(const Src in, int64_t at) {
  prefetch<KX, false>(in.x, at);
  if constexpr (ADD) prefetch<KX, false>(in.r, at);
}
template <int KX, int KY>
JLN_INLINE inline void prefetch_dst(const Src in, const void* y, int64_t at) {
  prefetch<KY, true>(y, at);
  if (in.s) prefetch<KX, true>(in.s, at);
}

enum Param : int { kW = 0, kB = 1, kShift = 2, kMscale = 3, kParams = 4 };

struct Config {
  float eps, offset;
  bool center, gemma;
  bool has[kParams];
  int round_h, round_y, round_b, round_f, round_s, round_m;
  int64_t rows, n, threads;
  int64_t per[kParams];  // rows per parameter group
  // the parameter group of row r; one group for all rows (the usual case) needs no division
  // (per row, the divisions took about 4% of a 256-wide bfloat16 forward, measured)
  bool one_group(int k) const { return per[k] == rows; }
  int64_t group(int k, int64_t r) const { return one_group(k) ? 0 : r / per[k]; }
  // the fused single-sweep forward and the fused backward apply (rows of dtype kx): simple, or
  // an RMSNorm with a scale and no bias whose only extra step is rounding h to x's own
  // precision before the scale (llama, t5) or gemma's 1 + w (see rms_weigh)
  bool fused(int kx) const {
    if (round_y || round_b || round_f || round_s || has[kShift] || has[kMscale]) return false;
    if (!round_h && !gemma) return true;
    return !center && has[kW] && !has[kB] && (gemma ? !round_h : round_h == kx);
  }
  // a fused RMSNorm's scale step: 0 h * w, 1 round(h) * w (llama, t5), 2 h * (1 + w) (gemma)
  int rms_weigh() const { return gemma ? 2 : round_h ? 1 : 0; }
  // adaptive LayerNorm's modulation in the fused forward (rows of dtype kx, y of dtype ky):
  // shift and scale, and every rounding step after the affine one to x's own precision (as an
  // eager framework in x's dtype rounds each step), y in x's dtype
  bool modulated(int kx, int ky) const {
    const int rk = kx == kF32 ? 0 : kx;
    return center && has[kShift] && has[kMscale] && !gemma && !round_h && !round_y && round_b == rk && round_f == rk &&
           round_s == rk && ky == kx;
  }
  // the fused forward applies: fused, or modulated
  bool fused_fwd(int kx, int ky) const { return fused(kx) || modulated(kx, ky); }
};

struct Params {
  const float* p[kParams];
  const float* row(const Config& c, int k, int64_t r) const { return p[k] + c.group(k, r) * c.n; }
};

// One row's parameter rows as the output sweeps take them (nullptr where absent): scale w,
// bias b, and adaptive LayerNorm's modulation factor f and shift sh.
struct RowParams {
  const float *w, *b, *f, *sh;
};


// (Forced inline: with the residual step it holds two roundings, and left to itself the
// compiler called it from the sweeps: 55% of a bfloat16 add_layer_norm forward's kernel time,
// 4096 wide, in cache, one CPU core.)
template <int KX, bool ADD>
JLN_INLINE inline vf vsrc(const Src in, int64_t i) {
  if constexpr (!ADD) {
    return vload<KX>(in.x, i);
  } else {
    return vround_store<KX>(in.s, i, vload<KX>(in.x, i) + vload<KX>(in.r, i));
  }
}

template <int KX, bool ADD>
inline float src1(const Src in, int64_t i) {
  if constexpr (!ADD) {
    return load<KX>(in.x, i);
  } else {
    const float v = round1(load<KX>(in.x, i) + load<KX>(in.r, i), KX);
    store<KX>(in.s, i, v);
    return v;
  }
}

// Whether the second statistics pass leaves e = x - hi in the scratch row of a half row of n elements
// (scratch rows are 513 to 2048 wide, see in_place): only for short rows, whose scratch row and
// float32 parameter rows stay in L1 together (in cache, bfloat16 LayerNorm: 1.02-1.07x at 256
// and 1024 wide, measured when 256-wide rows still took a scratch row; wider, writing the row
// back costs more than the output sweep's subtraction it saves: 0.93-0.99x at 2048, 4096 and
// 16384).
template <int KX>
inline bool holds_d(int64_t n) {
  return KX != kF32 && n <= 1024;
}

// Whether a row's passes read it in place (the source row itself, widened again by each pass)
// rather than from a float32 scratch row filled by the first pass: float32 rows always; half
// rows wider than 2048, whose scratch row would not stay in L1 beside the parameter rows
// (bfloat16 LayerNorm, one CPU core: in place 1.04-1.14x at 4096 wide, 1.22-1.26x at 16384,
// 0.80x at 2048); and half rows up to 512 wide, which then run in the row pipeline (pairs whose
// reductions overlap) instead of blocks through the scratch row (one CPU core, kernel alone,
// bfloat16 and float16 LayerNorm and RMSNorm, 3 alternating runs, in cache and from memory:
// in place 1.00-1.50x per case at 256, 384 and 512 wide; 0.90-1.29x at 768 and 0.80-1.16x at
// 1024, which keep the scratch row).
template <int KX>
inline bool in_place(int64_t n) {
  return KX == kF32 || n <= 512 || n > 2048;
}

// Elements j..j+15 (row_vec) or j (row_1) of a row as float32: with IP, from the source row
// `src` (x, or s with the residual step) at the row's offset o; else from the scratch row t.
template <int KX, bool IP>
inline vf row_vec(const float* t, const void* src, int64_t o, int64_t j) {
  if constexpr (IP) {
    return vload<KX>(src, o + j);
  } else {
    return vload<kF32>(t, j);
  }
}
template <int KX, bool IP>
inline float row_1(const float* t, const void* src, int64_t o, int64_t j) {
  if constexpr (IP) {
    return load<KX>(src, o + j);
  } else {
    return t[j];
  }
}


// A row's statistics.
struct RowStats {
  float p, m, rs;  // center: the rounded mean hi (after stage one) and its residual c (after
                   // stage two), the sweeps' row centred as (x - p) - m; RMS: 0, 0; and rstd
};

// Row statistics in two passes (center: the mean about the pivot x[0], rounded to one float,
// hi = x[0] + sum(x - x[0]) / n, then the sums of e = x - hi and e * e, which give the
// residual c = sum(e) / n and the variance sum(e * e) / n - c * c; RMS: the sum of squares),
// x being the source's row (s with the residual step), in two stages so that a block of short
// rows runs each stage row after row (one row's reductions, a chain of dependent additions, a
// division and a square root, then overlap the next row's sweep). The later passes read the
// row in place (IP, see in_place: the sweeps subtract hi and c) or from the float32 scratch
// row `t`, which the first pass fills with the widened row and, where holds_d, the second
// pass overwrites with e = x - hi, so each element is widened once, the later sweeps read it
// from cache and the output sweep subtracts only c (the same values, one step less). The
// first pass hints the source row `ahead` elements on into cache.
//
// Stage one: center: the rounded mean hi; RMS: the sum of squares and rstd.
// (Written to *out: returned by value, GCC 12 packed p and m into one register through the
// stack, two 4-byte stores read back as 8 bytes, a store-to-load forwarding stall on each
// row: see hsum.)
template <int KX, bool ADD, bool IP>
JLN_NOINLINE void stats_first(const Config& c, const Src in, int64_t o, float* __restrict__ t, int64_t ahead,
                              RowStats* __restrict__ out) {
  const int64_t n = c.n;
  constexpr bool wide = IP;  // no scratch row to fill
  RowStats& st = *out;
  st = RowStats{0.0f, 0.0f, 0.0f};
  if (c.center) {
    const float pv = src1<KX, ADD>(in, o);
    const float s = vsum(
        n,
        [&](int64_t j) {
          prefetch_src<KX, ADD>(in, o + ahead + j);
          const vf v = vsrc<KX, ADD>(in, o + j);
          if constexpr (!wide) std::memcpy(t + j, &v, sizeof(v));
          return vf(v - pv);
        },
        [&](int64_t j) {
          const float v = src1<KX, ADD>(in, o + j);
          if constexpr (!wide) t[j] = v;
          return v - pv;
        });
    st.p = pv + s / float(n);  // hi
    return;
  }
  const float q = vsumsq(
      n,
      [&](int64_t j) {
        prefetch_src<KX, ADD>(in, o + ahead + j);
        const vf v = vsrc<KX, ADD>(in, o + j);
        if constexpr (!wide) std::memcpy(t + j, &v, sizeof(v));
        return v;
      },
      [&](int64_t j) {
        const float v = src1<KX, ADD>(in, o + j);
        if constexpr (!wide) t[j] = v;
        return v * v;
      });
  st.rs = 1.0f / std::sqrt(q / float(n) + c.eps);
}

// Stage two (center only): the residual c of the rounded mean, the variance and rstd of NR
// consecutive rows (NR = 2 only in place; for a scratch row, e = x - hi replaces x in it where
// holds_d). `src`, `o`: the source and the first row's offset (IP).
template <int KX, bool IP, int NR = 1>
JLN_NOINLINE void stats_second(const Config& c, RowStats* st, float* __restrict__ t, const void* src, int64_t o) {
  static_assert(NR == 1 || IP, "two rows at once only in place");
  const int64_t n = c.n;
  float s[NR], q[NR];
  if constexpr (NR == 2) {
    const float hi[2] = {st[0].p, st[1].p};
    vsums_sq<2>(
        n, [&](int64_t j, int k) { return vf(vload<KX>(src, o + k * n + j) - hi[k]); },
        [&](int64_t j, int k) { return load<KX>(src, o + k * n + j) - hi[k]; }, s, q);
  } else {
    const float hi = st->p;
    const bool keep = !IP && holds_d<KX>(n);
    vsums_sq<1>(
        n,
        [&](int64_t j, int) {
          const vf e = row_vec<KX, IP>(t, src, o, j) - hi;
          if (keep) std::memcpy(t + j, &e, sizeof(e));
          return e;
        },
        [&](int64_t j, int) {
          const float e = row_1<KX, IP>(t, src, o, j) - hi;
          if (keep) t[j] = e;
          return e;
        },
        s, q);
  }
  for (int k = 0; k < NR; ++k) {
    const float cm = s[k] / float(n);
    st[k].m = cm;
    st[k].rs = 1.0f / std::sqrt(std::max(q[k] / float(n) - cm * cm, 0.0f) + c.eps);
  }
}

// A parameter row's element(s) at column j, and a rounding step, for 16 lanes (vf) or one
// element (float) alike.
template <typename T>
inline T param_at(const float* p, int64_t j) {
  if constexpr (std::is_same_v<T, vf>) {
    return vload<kF32>(p, j);
  } else {
    return p[j];
  }
}
inline vf round_to(vf v, int k) { return vround(v, k); }
inline float round_to(float v, int k) { return round1(v, k); }

// The fused sweeps' output step at column j for 16 lanes (vf) or one element (float): from the
// row's value as the sweep centers it (v: (x - p) - m, or x for RMSNorm) to y before its store.
// h = v * rstd; llama's and t5's rounding of h (RW = 1); the scale (w, or gemma's 1 + w for
// RW = 2); the bias; adaptive LayerNorm's modulation (MOD: round(round(.) * f) + shift, whose
// last rounding is the store's own, y having x's dtype; see Config::modulated). (Inlined by
// force: with the sweeps' dispatch in with_out_key, GCC called the modulated bfloat16 step once
// per 16 elements, and before it, vround from the modulated output sweep.)
template <int KX, bool W, bool B, int RW, bool MOD, typename T>
JLN_INLINE inline T fused_out(T v, float rs, const RowParams rp, int64_t j) {  // (rp by value: no reloads)
  constexpr int RK = KX == kF32 ? 0 : KX;
  v = v * rs;
  if constexpr (RW == 1) v = round_to(v, KX);
  if constexpr (W) v = RW == 2 ? v * (1.0f + param_at<T>(rp.w, j)) : v * param_at<T>(rp.w, j);
  if constexpr (B) v = v + param_at<T>(rp.b, j);
  if constexpr (MOD) v = round_to(round_to(v, RK) * param_at<T>(rp.f, j), RK) + param_at<T>(rp.sh, j);
  return v;
}

// The common forward (Config::fused_fwd: no rounding steps but llama's and t5's rounding of h
// and adaptive LayerNorm's modulation steps): one fused output sweep over a row (in place with
// IP, else the scratch row `t`), specialized on (center, scale, bias) and RMSNorm's scale step
// RW (rms_weigh) so the loop carries no branches (llama's bfloat16 RMSNorm through it rather
// than general_out: 1.22-1.46x, one CPU core, kernel alone) and MOD, adaptive LayerNorm's
// modulation (Config::modulated: y = round(round(h) * f) + sh, the last rounding left to the
// store; through JAX, one CPU core: 1.11-1.31x in bfloat16, up to 1.64x in float32);
// h = ((x - p) - m) * rstd with the row's statistics `st` (hi and its residual c; a scratch
// row holds e = x - hi where holds_d, else x, and only c is subtracted from e). Meanwhile the row of y
// `ahead` elements on is hinted for writing (`o`: the row's offset; `src`: as for
// stats_second).
template <int KX, int KY, bool C, bool W, bool B, bool IP, int RW = 0, bool MOD = false>
inline void simple_out_t(const float* __restrict__ t, const void* src, int64_t n, const RowStats st,
                         const RowParams& rp, const Src in, void* y, int64_t o, int64_t ahead) {
  const RowParams q = rp;  // (a local copy: the stores to y cannot change it)
  const bool sub_p = C && (IP || !holds_d<KX>(n));  // (a scratch row holding e: hi subtracted)
  const float p = st.p, m = st.m, rs = st.rs;
  int64_t j = 0;
  for (; j + V <= n; j += V) {
    prefetch_dst<KX, KY>(in, y, o + ahead + j);
    vf v = row_vec<KX, IP>(t, src, o, j);
    if (sub_p) v = v - p;
    if constexpr (C) v = v - m;
    vstore<KY>(y, o + j, fused_out<KX, W, B, RW, MOD>(v, rs, q, j));
  }
  for (; j < n; ++j) {
    float v = row_1<KX, IP>(t, src, o, j);
    if (sub_p) v = v - p;
    if constexpr (C) v = v - m;
    store<KY>(y, o + j, fused_out<KX, W, B, RW, MOD>(v, rs, q, j));
  }
}

// The fused output step's specialization for a row's parameters (one rule for every fused
// sweep): calls `sweep` with std::integral_constant values of (C, W, B, RW, MOD) as fused_out
// takes them: center, scale and bias present, RMSNorm's scale step (Config::rms_weigh) and
// adaptive LayerNorm's modulation (the factor row present; LayerNorm).
template <typename C, typename W, typename B, typename RW, typename MOD>
struct OutKey {  // (with_out_key's constants as template arguments)
  static constexpr bool c = C::value, w = W::value, b = B::value, mod = MOD::value;
  static constexpr int rw = RW::value;
};
template <typename F>
JLN_INLINE inline void with_out_key(const Config& c, const RowParams& rp, F&& sweep) {
  using T = std::true_type;
  using N = std::false_type;
  using R0 = std::integral_constant<int, 0>;
  if (rp.f) {
    switch ((rp.w ? 2 : 0) | (rp.b ? 1 : 0)) {
      case 3: return sweep(T{}, T{}, T{}, R0{}, T{});
      case 2: return sweep(T{}, T{}, N{}, R0{}, T{});
      case 1: return sweep(T{}, N{}, T{}, R0{}, T{});
      default: return sweep(T{}, N{}, N{}, R0{}, T{});
    }
  }
  switch (c.rms_weigh() ? 7 + c.rms_weigh() : (c.center ? 4 : 0) | (rp.w ? 2 : 0) | (rp.b ? 1 : 0)) {
    case 9: return sweep(N{}, T{}, N{}, std::integral_constant<int, 2>{}, N{});
    case 8: return sweep(N{}, T{}, N{}, std::integral_constant<int, 1>{}, N{});
    case 7: return sweep(T{}, T{}, T{}, R0{}, N{});
    case 6: return sweep(T{}, T{}, N{}, R0{}, N{});
    case 5: return sweep(T{}, N{}, T{}, R0{}, N{});
    case 4: return sweep(T{}, N{}, N{}, R0{}, N{});
    case 3: return sweep(N{}, T{}, T{}, R0{}, N{});
    case 2: return sweep(N{}, T{}, N{}, R0{}, N{});
    case 1: return sweep(N{}, N{}, T{}, R0{}, N{});
    default: return sweep(N{}, N{}, N{}, R0{}, N{});
  }
}

template <int KX, int KY, bool IP>
JLN_NOINLINE void simple_out(const Config& c, const float* t, const void* src, const RowStats st,
                             const RowParams& rp, const Src in, void* y, int64_t o, int64_t ahead) {
  with_out_key(c, rp, [&](auto C, auto W, auto B, auto RW, auto MOD) {
    using K = OutKey<decltype(C), decltype(W), decltype(B), decltype(RW), decltype(MOD)>;
    simple_out_t<KX, KY, K::c, K::w, K::b, IP, K::rw, K::mod>(t, src, c.n, st, rp, in, y, o, ahead);
  });
}

inline void round_inplace(float* v, int64_t n, int k) {
  if (k == kBF16 || k == kF16) {
    for (int64_t j = 0; j < n; ++j) v[j] = round1(v[j], k);
  }
}

template <int KX>
inline void normalized(const void* __restrict__ x, int64_t o, int64_t n, bool center, float p, float m,
                       float rs, float* __restrict__ h) {
  if (center) {
    for (int64_t j = 0; j < n; ++j) h[j] = ((load<KX>(x, o + j) - p) - m) * rs;
  } else {
    for (int64_t j = 0; j < n; ++j) h[j] = load<KX>(x, o + j) * rs;
  }
}

// v *= w (or 1 + w for gemma)
inline void weigh(float* __restrict__ v, const float* __restrict__ w, int64_t n, bool gemma) {
  if (gemma) {
    for (int64_t j = 0; j < n; ++j) v[j] = v[j] * (1.0f + w[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) v[j] = v[j] * w[j];
  }
}

// modulation factor f = round(offset + mscale, round_m) of one parameter row
inline void factor_row(const Config& c, const float* m, float* f) {
  for (int64_t j = 0; j < c.n; ++j) f[j] = c.offset + m[j];
  round_inplace(f, c.n, c.round_m);
}

// The forward after h, up to (and including) round_b: the LayerNorm/RMSNorm output before
// any modulation. In place on h.
inline void affine(const Config& c, const Params& P, int64_t r, float* h) {
  round_inplace(h, c.n, c.round_h);
  if (c.has[kW]) weigh(h, P.row(c, kW, r), c.n, c.gemma);
  round_inplace(h, c.n, c.round_y);
  if (c.has[kB]) {
    const float* br = P.row(c, kB, r);
    for (int64_t j = 0; j < c.n; ++j) h[j] = h[j] + br[j];
  }
  round_inplace(h, c.n, c.round_b);
}

// Every other forward (rounding steps, gemma, modulation): still one sweep per row, each
// step applied to 16 lanes in registers (the step flags are the same for every vector).
// The row, p, m, `o` and `ahead` as for simple_out_t.
template <int KX, int KY, bool IP>
inline void general_out(const Config& c, const float* __restrict__ t, const void* src, float p, float m,
                        float rs, const float* w, const float* b, const float* f, const float* sh,
                        const Src in, void* y, int64_t o, int64_t ahead) {
  const int64_t n = c.n;
  const bool sub_p = c.center && (IP || !holds_d<KX>(n));  // (a scratch row holding e: hi subtracted)
  int64_t j = 0;
  for (; j + V <= n; j += V) {
    prefetch_dst<KX, KY>(in, y, o + ahead + j);
    vf v = row_vec<KX, IP>(t, src, o, j);
    if (sub_p) v = v - p;
    if (c.center) v = v - m;
    v = v * rs;
    v = vround(v, c.round_h);
    if (w) v = c.gemma ? v * (1.0f + vload<kF32>(w, j)) : v * vload<kF32>(w, j);
    v = vround(v, c.round_y);
    if (b) v = v + vload<kF32>(b, j);
    v = vround(v, c.round_b);
    if (f) v = vround(v * vload<kF32>(f, j), c.round_f);
    if (sh) v = vround(v + vload<kF32>(sh, j), c.round_s);
    vstore<KY>(y, o + j, v);
  }
  if (j == n) return;
  // the last n % 16 elements through the scalar steps
  float tmp[V];
  const int64_t k = n - j;
  for (int64_t i = 0; i < k; ++i) {
    float v = row_1<KX, IP>(t, src, o, j + i);
    if (sub_p) v = v - p;
    if (c.center) v = v - m;
    tmp[i] = v * rs;
  }
  round_inplace(tmp, k, c.round_h);
  if (w) weigh(tmp, w + j, k, c.gemma);
  round_inplace(tmp, k, c.round_y);
  if (b) {
    for (int64_t i = 0; i < k; ++i) tmp[i] = tmp[i] + b[j + i];
  }
  round_inplace(tmp, k, c.round_b);
  if (f) {
    for (int64_t i = 0; i < k; ++i) tmp[i] = tmp[i] * f[j + i];
    round_inplace(tmp, k, c.round_f);
  }
  if (sh) {
    for (int64_t i = 0; i < k; ++i) tmp[i] = tmp[i] + sh[j + i];
    round_inplace(tmp, k, c.round_s);
  }
  for (int64_t i = 0; i < k; ++i) store<KY>(y, o + j + i, tmp[i]);
}

// Rows per block of the forward: short half-precision rows run a block at a time, stage by
// stage (measured on one CPU core, bfloat16 LayerNorm from memory: 1.24x at 128 wide, 1.34x
// at 256, 1.10x at 512; the block's float32 scratch rows, 4 to 8 KiB, stay in L1). Rows of
// 1024 and more, and float32 rows (read in place, no scratch), ran no faster in blocks (float32
// at 256: 0.83x) and run one at a time; common forwards of rows read in place run piped instead
// (see piped).
constexpr int64_t kMaxBlock = 8;
template <int KX>
inline int64_t block_rows(int64_t n) {
  if (KX == kF32 || n >= 1024) return 1;
  return std::max<int64_t>(2, std::min<int64_t>(kMaxBlock, 2048 / std::max<int64_t>(n, 1)));
}

// Whether the forward runs as a row pipeline (fwd_rows_piped): the common (fused) forwards of
// rows read in place, and of half-precision rows in scratch rows that run one at a time (1024
// to 2048 wide: bfloat16 LayerNorm 1.17-1.19x, RMSNorm 1.08-1.16x, one CPU core, data from
// memory). Shorter half rows keep their blocks (piped in scratch rows, bfloat16 LayerNorm at
// 256 wide ran 0.89-0.95x; read in place, 0.76x).
template <int KX, int KY>
inline bool piped(const Config& c) {
  return (in_place<KX>(c.n) || block_rows<KX>(c.n) == 1) && c.fused_fwd(KX, KY);
}

// Rows per step of a row pipeline (fwd_rows_piped): pairs for the common forwards (adaptive
// LayerNorm's modulated ones included) of rows read in place whose y has x's dtype (pairs for
// every pair of dtypes took the library's build from 72 to 137 s) and whose two rows share
// their parameter rows (one row each, or per-example groups that pairs do not straddle), under
// 1024 or from kInterleaved wide; 1 otherwise. (Modulated rows ran one a step before: their
// parameter rows, float32 factor and shift, stream from L2 for every row; in pairs, through
// jln bench's adaptive_layer_norm, DiT's 8 examples, one CPU core, 5 alternating runs,
// float32 1.19x at 4096 wide and 1.27x at 16384, half precision 0.99-1.04x, noise.) A pair's
// rows' reductions (chains of dependent additions, a division and a square root) then overlap
// each other, and a step's latency is
// spread over two rows. Rows kInterleaved or more wide are swept together, element by element
// (one loop for both rows' first, second and output passes); shorter pairs run each row's
// sweeps in turn, one row's reductions finishing while the other row sweeps, and their loads
// stay one sequential stream (interleaved, two streams 1 KiB apart ran 0.65-0.82x from
// memory, float32 RMSNorm 256 wide). Against one row a step (and float32 LayerNorm's former
// pairs of fwd_rows from 4096 wide), one CPU core, kernel alone, data from memory, 3-4 runs:
// float32 LayerNorm 1.09-1.23x at 256 wide, 1.08-1.14x at 4096 and 16384; RMSNorm 0.95-1.19x
// at 256, 1.07-1.23x at 4096 and 16384; bfloat16 (in place from 4096 wide) 1.00-1.11x. At 1024
// wide pairs in turn ran 0.89-0.99x, and one row a step stays.
constexpr int64_t kInterleaved = 4096;
template <int KX, int KY>
inline int pipe_rows(const Config& c, int64_t r1) {
  if (KX != KY || !in_place<KX>(c.n) || !c.fused_fwd(KX, KY) || (c.n >= 1024 && c.n < kInterleaved)) return 1;
  for (int k = 0; k < kParams; ++k) {
    // per-example parameters: the pairs end at r1 (fwd_rows_piped runs an odd first row
    // alone), so they start on even rows, and share their parameter rows, where r1 is even and
    // the groups hold an even number of rows
    if (c.has[k] && !c.one_group(k) && (c.per[k] % 2 || r1 % 2)) return 1;
  }
  return 2;
}

// The parameter rows of the rows a forward sweeps, row by row; the modulation factor (see
// factor_row) is computed into `f` once per parameter group. `f` is sized only where there is
// a modulation (sized for every chunk of rows, a 16384-wide float32 LayerNorm forward wrote
// and page-faulted 512 KiB of unused zeros a call: 119 page faults, measured).
struct ParamRows {
  std::vector<float> f;
  int64_t f_group = -1;
  explicit ParamRows(const Config& c) {
    if (c.has[kMscale]) f.resize(static_cast<size_t>(c.n));
  }
  RowParams at(const Config& c, const Params& P, int64_t r) {
    RowParams rp{c.has[kW] ? P.row(c, kW, r) : nullptr, c.has[kB] ? P.row(c, kB, r) : nullptr, nullptr,
                 c.has[kShift] ? P.row(c, kShift, r) : nullptr};
    if (c.has[kMscale]) {
      if (c.group(kMscale, r) != f_group) {
        f_group = c.group(kMscale, r);
        factor_row(c, P.row(c, kMscale, r), f.data());
      }
      rp.f = f.data();
    }
    return rp;
  }
};

// Rows r0..r1 of the forward one block (block_rows) at a time, stage by stage; IP: whether
// the rows are read in place (in_place).
template <int KX, int KY, bool ADD, bool IP>
void fwd_rows(const Config& c, const Src in, const Params& P, void* y, float* mean, float* rstd_out,
              int64_t r0, int64_t r1) {
  const int64_t n = c.n;
  const int64_t R = block_rows<KX>(n), ahead = R * n;  // prefetches run one block ahead
  const void* src = ADD ? in.s : in.x;
  std::vector<float> buf(static_cast<size_t>(IP ? 0 : R * n), 0.0f);
  ParamRows rows(c);
  RowStats st[kMaxBlock];
  for (int64_t rb = r0; rb < r1; rb += R) {
    const int64_t k1 = std::min(R, r1 - rb);
    for (int64_t k = 0; k < k1; ++k) {
      stats_first<KX, ADD, IP>(c, in, (rb + k) * n, buf.data() + (IP ? 0 : k * n), ahead, &st[k]);
    }
    if (c.center) {
      for (int64_t k = 0; k < k1; ++k) {
        stats_second<KX, IP>(c, &st[k], buf.data() + (IP ? 0 : k * n), src, (rb + k) * n);
      }
    }
    for (int64_t k = 0; k < k1; ++k) {
      mean[rb + k] = st[k].p;
      rstd_out[rb + k] = st[k].rs;
    }
    for (int64_t k = 0; k < k1; ++k) {
      const int64_t r = rb + k, o = r * n;
      const float* t = buf.data() + (IP ? 0 : k * n);
      const RowParams rp = rows.at(c, P, r);
      if (c.fused_fwd(KX, KY)) {
        simple_out<KX, KY, IP>(c, t, src, st[k], rp, in, y, o, ahead);
      } else {
        general_out<KX, KY, IP>(c, t, src, st[k].p, st[k].m, st[k].rs, rp.w, rp.b, rp.f, rp.sh, in, y, o, ahead);
      }
    }
  }
}

// One sweep over NR rows and the NR rows after them, read in place or (NR = 1) from scratch
// rows: the output of rows r..r+NR-1 (offset o, statistics st[k], their shared parameter rows
// rp) and the first statistics pass of the NR rows `gap` elements on (the next step's), whose
// statistics (center: the rounded mean hi; RMS: rstd) it writes to nx. The next rows' loads (from memory) and these rows'
// stores then stream side by side, as in a copy, and the rows' arithmetic is independent, so
// none waits for another; the source rows after the next ones are hinted into cache on the
// way. Specialized on (center, scale, bias), RW and MOD as simple_out_t; each row's sum is
// vsum's or vsumsq's (four accumulators, the same fixed order).
template <int KX, int KY, bool ADD, bool IP, int NR, bool C, bool W, bool B, int RW = 0, bool MOD = false>
JLN_NOINLINE void out_first_t(const Config& c, const Src in, const void* src, const RowStats* st,
                              const RowParams& rp, void* y, int64_t o, int64_t gap, const float* __restrict__ t,
                              float* __restrict__ t2, RowStats* nx) {
  static_assert(NR == 1 || IP, "two rows at once only in place");
  const int64_t n = c.n, o2 = o + gap;
  const RowParams q = rp;  // (a local copy: the stores to y cannot change it)
  const bool sub_p = C && (IP || !holds_d<KX>(n));  // (a scratch row holding e: hi subtracted)
  const float p[2] = {st[0].p, st[NR - 1].p}, m[2] = {st[0].m, st[NR - 1].m}, rs[2] = {st[0].rs, st[NR - 1].rs};
  const float pv0 = C ? src1<KX, ADD>(in, o2) : 0.0f;  // (the pivots)
  const float pv[2] = {pv0, C && NR == 2 ? src1<KX, ADD>(in, o2 + n) : pv0};
  // (out and next are inlined by force: left to the compiler, whether it called out varied
  // with unrelated changes elsewhere in the file, and bfloat16 LayerNorm 4096 wide then took
  // 1.4x as long, in cache, one CPU core)
  auto out = [&](int64_t j, int k) JLN_INLINE {  // row r + k's output at j, before its store
    vf v = row_vec<KX, IP>(t, src, o + k * n, j);
    if (sub_p) v = v - p[k];
    if constexpr (C) v = v - m[k];
    return fused_out<KX, W, B, RW, MOD>(v, rs[k], q, j);
  };
  auto out1 = [&](int64_t j, int k) {
    float v = row_1<KX, IP>(t, src, o + k * n, j);
    if (sub_p) v = v - p[k];
    if constexpr (C) v = v - m[k];
    store<KY>(y, o + k * n + j, fused_out<KX, W, B, RW, MOD>(v, rs[k], q, j));
  };
  // row r + NR + k's term: x - pivot (center) or x (RMS, squared by the accumulation); x
  // kept in the scratch row t2 (!IP)
  auto next = [&](int64_t j, int k) JLN_INLINE {
    prefetch_src<KX, ADD>(in, o2 + gap + k * n + j);
    const vf v = vsrc<KX, ADD>(in, o2 + k * n + j);
    if constexpr (!IP) std::memcpy(t2 + j, &v, sizeof(v));
    return C ? vf(v - pv[k]) : v;
  };
  auto acc = [](vf& a, vf d) { a = C ? a + d : vfma(d, d, a); };
  vf a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
  int64_t j = 0;
  if constexpr (NR == 2) {
    // every load of a step before its stores: rows 1024 floats wide lie 4 KiB apart, and a load
    // after a store to the same address modulo 4 KiB waits for it. (Inlined by force: left to
    // itself the compiler called it, 0.5x; forced for NR = 1 too, the library's build took
    // 137 s rather than 72.)
    auto step = [&](int64_t j, vf& a, vf& b) JLN_INLINE {
      const vf d0 = next(j, 0), d1 = next(j, 1), y0 = out(j, 0), y1 = out(j, 1);
      acc(a, d0);
      acc(b, d1);
      vstore<KY>(y, o + j, y0);
      vstore<KY>(y, o + n + j, y1);
    };
    for (; j + 4 * V <= n; j += 4 * V) {
      step(j, a0, b0);
      step(j + V, a1, b1);
      step(j + 2 * V, a2, b2);
      step(j + 3 * V, a3, b3);
    }
    for (; j + V <= n; j += V) step(j, a0, b0);
  } else {
    for (; j + 4 * V <= n; j += 4 * V) {
      acc(a0, next(j, 0));
      vstore<KY>(y, o + j, out(j, 0));
      acc(a1, next(j + V, 0));
      vstore<KY>(y, o + j + V, out(j + V, 0));
      acc(a2, next(j + 2 * V, 0));
      vstore<KY>(y, o + j + 2 * V, out(j + 2 * V, 0));
      acc(a3, next(j + 3 * V, 0));
      vstore<KY>(y, o + j + 3 * V, out(j + 3 * V, 0));
    }
    for (; j + V <= n; j += V) {
      acc(a0, next(j, 0));
      vstore<KY>(y, o + j, out(j, 0));
    }
  }
  float tail[2] = {0, 0};
  for (; j < n; ++j) {
    for (int k = 0; k < NR; ++k) {
      const float v = src1<KX, ADD>(in, o2 + k * n + j);
      const float d = C ? v - pv[k] : v;
      if constexpr (!IP) t2[j] = v;
      tail[k] += C ? d : d * d;
      out1(j, k);
    }
  }
  const float sum[2] = {hsum((a0 + a1) + (a2 + a3)) + tail[0], hsum((b0 + b1) + (b2 + b3)) + tail[1]};
  for (int k = 0; k < NR; ++k) {
    nx[k] = RowStats{0.0f, 0.0f, 0.0f};
    if constexpr (C) {
      nx[k].p = pv[k] + sum[k] / float(n);  // hi
    } else {
      nx[k].rs = 1.0f / std::sqrt(sum[k] / float(n) + c.eps);
    }
  }
}

template <int KX, int KY, bool ADD, bool IP, int NR>
JLN_NOINLINE void out_first(const Config& c, const Src in, const void* src, const RowStats* st,
                            const RowParams& rp, void* y, int64_t o, int64_t gap, const float* t, float* t2,
                            RowStats* nx) {
  with_out_key(c, rp, [&](auto C, auto W, auto B, auto RW, auto MOD) {
    using K = OutKey<decltype(C), decltype(W), decltype(B), decltype(RW), decltype(MOD)>;
    out_first_t<KX, KY, ADD, IP, NR, K::c, K::w, K::b, K::rw, K::mod>(c, in, src, st, rp, y, o, gap, t, t2, nx);
  });
}

// Rows r0..r1 of a common forward, as a pipeline (see piped) of NR rows a step (pipe_rows),
// read in place (IP) or (NR = 1) from two float32 scratch rows taken in turns (the one row r's
// output sweep reads, the one row r + 1's first pass fills): the output sweep of rows
// r..r+NR-1 carries the first pass of the next NR rows (out_first), then their second pass
// (center) completes their statistics. The rows before the first have none to carry, the last
// none to hand on; with NR = 2, an odd first row runs alone. Measured against one row at a
// time, one CPU core, data from memory: float32 LayerNorm 1.17-1.28x at 256 wide, 1.05-1.35x
// at 1024; bfloat16 from 4096 wide: LayerNorm 1.08-1.18x, RMSNorm 1.27-1.37x; float32 RMSNorm
// 0.9-1.1x.
template <int KX, int KY, bool ADD, bool IP, int NR>
void fwd_rows_piped(const Config& c, const Src in, const Params& P, void* y, float* mean, float* rstd_out,
                    int64_t r0, int64_t r1) {
  static_assert(NR == 1 || IP, "two rows a step only in place");
  const int64_t n = c.n;
  const void* src = ADD ? in.s : in.x;
  ParamRows rows(c);
  // scratch rows (!IP): one for the row being written, one for the row being read; the second
  // starts 80 floats further on, so that the two rows' same elements never lie a multiple of
  // 4 KiB apart (the sweep loads one row while it stores the other)
  std::vector<float> buf(static_cast<size_t>(IP ? 0 : 2 * n + 80), 0.0f);
  float* tb[2] = {IP ? nullptr : buf.data(), IP ? nullptr : buf.data() + n + 80};
  RowStats st[NR], nx[NR];
  if (NR == 2 && (r1 - r0) % 2) {  // the odd row, alone
    stats_first<KX, ADD, IP>(c, in, r0 * n, nullptr, n, &st[0]);
    if (c.center) stats_second<KX, IP>(c, st, nullptr, src, r0 * n);
    mean[r0] = st[0].p;
    rstd_out[r0] = st[0].rs;
    simple_out<KX, KY, IP>(c, nullptr, src, st[0], rows.at(c, P, r0), in, y, r0 * n, n);
    if (++r0 == r1) return;
  }
  for (int k = 0; k < NR; ++k) stats_first<KX, ADD, IP>(c, in, (r0 + k) * n, tb[0], NR * n, &st[k]);
  if (c.center) stats_second<KX, IP, NR>(c, st, tb[0], src, r0 * n);
  for (int64_t r = r0; r < r1; r += NR) {
    const int64_t o = r * n;
    float* cur = tb[((r - r0) / NR) & 1];
    float* nxt = tb[((r - r0) / NR + 1) & 1];
    const RowParams rp = rows.at(c, P, r);  // (shared by the rows: see pipe_rows)
    for (int k = 0; k < NR; ++k) {
      mean[r + k] = st[k].p;
      rstd_out[r + k] = st[k].rs;
    }
    if (r + NR == r1) {
      for (int k = 0; k < NR; ++k) simple_out<KX, KY, IP>(c, cur, src, st[k], rp, in, y, o + k * n, n);
      break;
    }
    if (NR == 1 || n >= kInterleaved) {
      out_first<KX, KY, ADD, IP, NR>(c, in, src, st, rp, y, o, NR * n, cur, nxt, nx);
      if (c.center) stats_second<KX, IP, NR>(c, nx, nxt, src, o + NR * n);
    } else {  // (short pairs: each row's sweeps in turn)
      for (int k = 0; k < NR; ++k) {
        out_first<KX, KY, ADD, IP, 1>(c, in, src, st + k, rp, y, o + k * n, NR * n, cur, nxt, nx + k);
      }
      for (int k = 0; k < NR && c.center; ++k) stats_second<KX, IP>(c, nx + k, nxt, src, o + (NR + k) * n);
    }
    for (int k = 0; k < NR; ++k) st[k] = nx[k];
  }
}

// The forward of rows r0..r1: piped, or a block of rows at a time (fwd_rows, IP chosen by
// in_place: float32 rows are always read in place)
template <int KX, int KY, bool ADD>
void fwd_rows_any(const Config& c, const Src in, const Params& P, void* y, float* mean, float* rstd,
                  int64_t r0, int64_t r1) {
  if (piped<KX, KY>(c)) {
    if (pipe_rows<KX, KY>(c, r1) == 2) {
      if constexpr (KX == KY) fwd_rows_piped<KX, KY, ADD, true, 2>(c, in, P, y, mean, rstd, r0, r1);
    } else if (in_place<KX>(c.n)) {
      fwd_rows_piped<KX, KY, ADD, true, 1>(c, in, P, y, mean, rstd, r0, r1);
    } else if constexpr (KX != kF32) {  // (no scratch-row build for float32)
      fwd_rows_piped<KX, KY, ADD, false, 1>(c, in, P, y, mean, rstd, r0, r1);
    }
  } else if (KX == kF32 || in_place<KX>(c.n)) {
    fwd_rows<KX, KY, ADD, true>(c, in, P, y, mean, rstd, r0, r1);
  } else if constexpr (KX != kF32) {  // (no scratch-row build for float32)
    fwd_rows<KX, KY, ADD, false>(c, in, P, y, mean, rstd, r0, r1);
  }
}


struct Grads {
  std::vector<double> d[kParams];
};

inline void accumulate(double* acc, const float* v, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += double(v[j]);
}
inline void accumulate(double* acc, const float* u, const float* v, int64_t n) {
  for (int64_t j = 0; j < n; ++j) acc[j] += double(u[j]) * double(v[j]);
}

// The common backward (Config::fused, RW its rms_weigh): two fused sweeps per row, the first
// for the row sums and the parameter gradients, the second writing dx. The scale's step, as
// the general backward takes it: dw += c * round(h) and g = round(c * w) for RW = 1 (llama,
// t5: h rounded to x's precision), dw += c * h and g = c * (1 + w) for RW = 2 (gemma). MOD:
// adaptive LayerNorm's modulation (Config::modulated; its roundings of c to y's own dtype
// change nothing): dshift += c, dmscale += c * yb (yb = round(h * w + b), the forward's value
// before the modulation), then c = round(c * f) goes on as the cotangent of yb.
template <int KX, int KY, int RW, bool MOD = false>
inline void simple_bwd(const Config& c, const void* ct, const void* x, int64_t o, float p, float m,
                       float rs, const float* w, float* __restrict__ dw, float* __restrict__ db, void* dx,
                       const float* b = nullptr, const float* f = nullptr, float* __restrict__ dsh = nullptr,
                       float* __restrict__ dms = nullptr) {
  constexpr int RK = KX == kF32 ? 0 : KX;  // the modulation's rounding
  const int64_t n = c.n;
  const float fn = float(n);
  // the row sums in four independent accumulator pairs (one pair chains an addition's latency
  // per vector), combined in a fixed order; the next row of x and ct is hinted into cache
  vf sg[4] = {}, shg[4] = {};
  float sg_t = 0, shg_t = 0;
  auto step = [&](int64_t j, int a) {
    prefetch<KX, false>(x, o + n + j);
    prefetch<KY, false>(ct, o + n + j);
    const vf xv = vload<KX>(x, o + j);
    const vf h = c.center ? ((xv - p) - m) * rs : xv * rs;
    vf cv = vload<KY>(ct, o + j);
    if constexpr (MOD) {
      vstore<kF32>(dsh, j, vload<kF32>(dsh, j) + cv);
      vf yb = w ? h * vload<kF32>(w, j) : h;
      if (b) yb = yb + vload<kF32>(b, j);
      vstore<kF32>(dms, j, vload<kF32>(dms, j) + cv * vround(yb, RK));
      cv = vround(cv * vload<kF32>(f, j), RK);
    }
    if (db) vstore<kF32>(db, j, vload<kF32>(db, j) + cv);
    vf g = cv;
    if (w) {
      vstore<kF32>(dw, j, vload<kF32>(dw, j) + cv * (RW == 1 ? vround(h, KX) : h));
      g = RW == 2 ? cv * (1.0f + vload<kF32>(w, j)) : cv * vload<kF32>(w, j);
      if constexpr (RW == 1) g = vround(g, KX);
    }
    sg[a] += g;
    shg[a] += h * g;
  };
  int64_t j = 0;
  for (; j + 4 * V <= n; j += 4 * V) {
    step(j, 0);
    step(j + V, 1);
    step(j + 2 * V, 2);
    step(j + 3 * V, 3);
  }
  for (; j + V <= n; j += V) step(j, 0);
  for (int64_t t = j; t < n; ++t) {
    const float xv = load<KX>(x, o + t);
    const float h = c.center ? ((xv - p) - m) * rs : xv * rs;
    float cv = load<KY>(ct, o + t);
    if constexpr (MOD) {
      dsh[t] += cv;
      float yb = w ? h * w[t] : h;
      if (b) yb = yb + b[t];
      dms[t] += cv * round1(yb, RK);
      cv = round1(cv * f[t], RK);
    }
    if (db) db[t] += cv;
    float g = cv;
    if (w) {
      dw[t] += cv * (RW == 1 ? round1(h, KX) : h);
      g = RW == 2 ? cv * (1.0f + w[t]) : cv * w[t];
      if constexpr (RW == 1) g = round1(g, KX);
    }
    sg_t += g;
    shg_t += h * g;
  }
  const float mg = c.center ? (hsum((sg[0] + sg[1]) + (sg[2] + sg[3])) + sg_t) / fn : 0.0f;
  const float mhg = (hsum((shg[0] + shg[1]) + (shg[2] + shg[3])) + shg_t) / fn;
  j = 0;
  for (; j + V <= n; j += V) {
    prefetch<KX, true>(dx, o + n + j);
    const vf xv = vload<KX>(x, o + j);
    const vf h = c.center ? ((xv - p) - m) * rs : xv * rs;
    vf g = vload<KY>(ct, o + j);
    if constexpr (MOD) g = vround(g * vload<kF32>(f, j), RK);
    if (w) g = RW == 2 ? g * (1.0f + vload<kF32>(w, j)) : g * vload<kF32>(w, j);
    if constexpr (RW == 1) g = vround(g, KX);
    vstore<KX>(dx, o + j, rs * ((g - mg) - h * mhg));
  }
  for (; j < n; ++j) {
    const float xv = load<KX>(x, o + j);
    const float h = c.center ? ((xv - p) - m) * rs : xv * rs;
    float g = load<KY>(ct, o + j);
    if constexpr (MOD) g = round1(g * f[j], RK);
    if (w) g = RW == 2 ? g * (1.0f + w[j]) : g * w[j];
    if constexpr (RW == 1) g = round1(g, KX);
    store<KX>(dx, o + j, rs * ((g - mg) - h * mhg));
  }
}

template <int KX, int KY>
void bwd_rows(const Config& c, const void* ct, const void* x, const Params& P, const float* mean,
              const float* rstd, void* dx, Grads* gr, int64_t r0, int64_t r1) {
  const int64_t n = c.n;
  const float fn = float(n);
  std::vector<float> gbuf(static_cast<size_t>(n), 0.0f), hbuf(gbuf), tbuf(gbuf), fbuf(gbuf);
  float *g = gbuf.data(), *h = hbuf.data(), *t = tbuf.data(), *f = fbuf.data();
  int64_t f_group = -1;
  auto grad_row = [&](int k, int64_t r) { return gr->d[k].data() + c.group(k, r) * n; };
  std::vector<float> part[kParams];
  int64_t part_group[kParams];
  for (int k = 0; k < kParams; ++k) {
    part[k].assign(static_cast<size_t>(c.has[k] ? n : 0), 0.0f);
    part_group[k] = -1;
  }
  auto flush = [&](int k) {
    if (part_group[k] < 0) return;
    double* acc = gr->d[k].data() + part_group[k] * n;
    float* pk = part[k].data();
    for (int64_t j = 0; j < n; ++j) {
      acc[j] += double(pk[j]);
      pk[j] = 0.0f;
    }
  };
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * n;
    const float rs = rstd[r];
    // center: the rounded mean hi the forward saved and its residual c, recomputed (x - hi
    // as the forward's second pass takes it); the row is centred as (x - hi) - c
    const float p = c.center ? mean[r] : 0.0f;
    const float m = c.center ? vsum(n, [&](int64_t j) { return vf(vload<KX>(x, o + j) - p); },
                                    [&](int64_t j) { return load<KX>(x, o + j) - p; }) / fn
                             : 0.0f;
    const bool mod = c.modulated(KX, KY);
    if (c.fused(KX) || mod) {
      // float32 partial sums over the rows of one parameter group within this chunk, added
      // to the float64 totals when the group changes and at the end
      for (int k = 0; k < kParams; ++k) {
        if (c.has[k] && c.group(k, r) != part_group[k]) {
          flush(k);
          part_group[k] = c.group(k, r);
        }
      }
      const float* wr = c.has[kW] ? P.row(c, kW, r) : nullptr;
      float* dwr = c.has[kW] ? part[kW].data() : nullptr;
      float* dbr = c.has[kB] ? part[kB].data() : nullptr;
      if (mod) {
        if (c.group(kMscale, r) != f_group) {
          f_group = c.group(kMscale, r);
          factor_row(c, P.row(c, kMscale, r), f);
        }
        simple_bwd<KX, KY, 0, true>(c, ct, x, o, p, m, rs, wr, dwr, dbr, dx, c.has[kB] ? P.row(c, kB, r) : nullptr,
                                    f, part[kShift].data(), part[kMscale].data());
        continue;
      }
      switch (c.rms_weigh()) {
        case 1: simple_bwd<KX, KY, 1>(c, ct, x, o, p, m, rs, wr, dwr, dbr, dx); break;
        case 2: simple_bwd<KX, KY, 2>(c, ct, x, o, p, m, rs, wr, dwr, dbr, dx); break;
        default: simple_bwd<KX, KY, 0>(c, ct, x, o, p, m, rs, wr, dwr, dbr, dx);
      }
      continue;
    }
    normalized<KX>(x, o, n, c.center, p, m, rs, h);
    for (int64_t j = 0; j < n; ++j) g[j] = load<KY>(ct, o + j);
    {  // the rounding steps apply whether or not their operand's gradient is wanted
      round_inplace(g, n, c.round_s);
      if (c.has[kShift]) accumulate(grad_row(kShift, r), g, n);
      round_inplace(g, n, c.round_f);
      if (c.has[kMscale]) {
        if (c.group(kMscale, r) != f_group) {
          f_group = c.group(kMscale, r);
          factor_row(c, P.row(c, kMscale, r), f);
        }
        std::memcpy(t, h, size_t(n) * sizeof(float));
        affine(c, P, r, t);  // the forward's value before modulation
        accumulate(grad_row(kMscale, r), g, t, n);
        for (int64_t j = 0; j < n; ++j) g[j] = g[j] * f[j];
      }
    }
    round_inplace(g, n, c.round_b);
    if (c.has[kB]) accumulate(grad_row(kB, r), g, n);
    round_inplace(g, n, c.round_y);
    if (c.has[kW]) {
      const float* hr = h;
      if (c.round_h) {
        std::memcpy(t, h, size_t(n) * sizeof(float));
        round_inplace(t, n, c.round_h);
        hr = t;
      }
      accumulate(grad_row(kW, r), g, hr, n);
      weigh(g, P.row(c, kW, r), n, c.gemma);
    }
    round_inplace(g, n, c.round_h);
    const float sg = c.center ? vsum(n, [&](int64_t j) { return vload<kF32>(g, j); },
                                     [&](int64_t j) { return g[j]; }) / fn : 0.0f;
    const float shg = vsum(n, [&](int64_t j) { return vload<kF32>(h, j) * vload<kF32>(g, j); },
                           [&](int64_t j) { return h[j] * g[j]; }) / fn;
    for (int64_t j = 0; j < n; ++j) g[j] = rs * ((g[j] - sg) - h[j] * shg);
    store_row<KX>(dx, o, g, n);
  }
  for (int k = 0; k < kParams; ++k) flush(k);
}

inline int64_t workers_of(ffi::ThreadPool& pool, const Config& c) { return pool_workers(pool, c.threads); }

template <template <int, int> class Fn, typename... A>
ffi::Error dispatch2(int kx, int ky, A&&... args) {
#define JLN_CASE(X, Y) \
  if (kx == X && ky == Y) return Fn<X, Y>::run(std::forward<A>(args)...);
  JLN_CASE(kF32, kF32) JLN_CASE(kF32, kBF16) JLN_CASE(kF32, kF16)
  JLN_CASE(kBF16, kF32) JLN_CASE(kBF16, kBF16) JLN_CASE(kBF16, kF16)
  JLN_CASE(kF16, kF32) JLN_CASE(kF16, kBF16) JLN_CASE(kF16, kF16)
#undef JLN_CASE
  return ffi::Error::InvalidArgument("jln native CPU kernels take float32, bfloat16 or float16");
}

// A (x dtype, y dtype) pair's forward and backward over all rows, on the intra-op pool.
template <int KX, int KY>
struct Fwd {
  static ffi::Error run(ffi::ThreadPool& pool, const Config& c, const Src in, const Params& P,
                        void* y, float* mean, float* rstd);
};
template <int KX, int KY>
struct Bwd {
  static ffi::Error run(ffi::ThreadPool& pool, const Config& c, const void* ct, const void* x,
                        const Params& P, const float* mean, const float* rstd, void* dx,
                        float* const* dp);
};

#if !defined(JLN_SPLIT) || defined(JLN_KX)
template <int KX, int KY>
ffi::Error Fwd<KX, KY>::run(ffi::ThreadPool& pool, const Config& c, const Src in, const Params& P, void* y,
                            float* mean, float* rstd) {
  parallel_rows(pool, c.rows, c.n, workers_of(pool, c), [=, &c, &P](int64_t r0, int64_t r1, int64_t) {
    if (in.r) {
      fwd_rows_any<KX, KY, true>(c, in, P, y, mean, rstd, r0, r1);
    } else {
      fwd_rows_any<KX, KY, false>(c, in, P, y, mean, rstd, r0, r1);
    }
  });
  return ffi::Error::Success();
}

template <int KX, int KY>
ffi::Error Bwd<KX, KY>::run(ffi::ThreadPool& pool, const Config& c, const void* ct, const void* x,
                            const Params& P, const float* mean, const float* rstd, void* dx,
                            float* const* dp) {
  const int64_t workers = workers_of(pool, c);
  std::vector<Grads> partial(size_t(std::max<int64_t>(1, workers)));
  for (auto& part : partial) {
    for (int k = 0; k < kParams; ++k) {
      if (c.has[k]) part.d[k].assign(size_t((c.rows / c.per[k]) * c.n), 0.0);
    }
  }
  Grads* parts = partial.data();
  parallel_rows(pool, c.rows, c.n, workers, [=, &c, &P](int64_t r0, int64_t r1, int64_t s) {
    bwd_rows<KX, KY>(c, ct, x, P, mean, rstd, dx, parts + s, r0, r1);
  });
  for (int k = 0; k < kParams; ++k) {
    if (!c.has[k]) continue;
    const int64_t size = (c.rows / c.per[k]) * c.n;
    for (int64_t i = 0; i < size; ++i) {
      double total = 0;
      for (auto& part : partial) total += part.d[k][size_t(i)];
      dp[k][i] = float(total);
    }
  }
  return ffi::Error::Success();
}
#endif

#if defined(JLN_SPLIT) && defined(JLN_KX)
template struct Fwd<JLN_KX, JLN_KY>;
template struct Bwd<JLN_KX, JLN_KY>;
#endif

#if !defined(JLN_SPLIT) || defined(JLN_MAIN)

struct NormAttrs {
  float eps, offset;
  int32_t center, gemma, round_h, round_y, round_b, round_f, round_s, round_m;
  int32_t has_scale, has_bias, has_shift, has_mscale;
  int32_t threads;  // at most this many workers (0: the whole intra-op pool)
};

ffi::Error make_config(const ffi::AnyBuffer& x, const ffi::AnyBuffer* params, const NormAttrs& a, Config* c) {
  auto dims = x.dimensions();
  if (dims.size() < 1) return ffi::Error::InvalidArgument("jln native kernels: x must have rank >= 1");
  c->n = dims.back();
  if (c->n <= 0) return ffi::Error::InvalidArgument("jln native kernels: empty rows");
  c->rows = int64_t(x.element_count()) / c->n;
  c->eps = a.eps;
  c->offset = a.offset;
  c->center = a.center != 0;
  c->gemma = a.gemma != 0;
  c->round_h = a.round_h;
  c->round_y = a.round_y;
  c->round_b = a.round_b;
  c->round_f = a.round_f;
  c->round_s = a.round_s;
  c->round_m = a.round_m;
  c->threads = a.threads;
  const int32_t has[kParams] = {a.has_scale, a.has_bias, a.has_shift, a.has_mscale};
  for (int k = 0; k < kParams; ++k) {
    c->has[k] = has[k] != 0;
    c->per[k] = c->rows;
    if (!c->has[k]) continue;
    const int64_t groups = int64_t(params[k].element_count()) / c->n;
    if (groups < 1 || groups * c->n != int64_t(params[k].element_count()) || c->rows % groups) {
      return ffi::Error::InvalidArgument("jln native kernels: a parameter's groups must divide the rows");
    }
    c->per[k] = c->rows / groups;
  }
  return ffi::Error::Success();
}

// Parameters arrive in their own dtypes (float32, bfloat16 or float16; they are O(groups * n),
// small next to x): non-float32 ones are widened once per call into `storage`.
bool params_of(const Config& c, const ffi::AnyBuffer* params, std::vector<float>* storage, Params* P) {
  for (int k = 0; k < kParams; ++k) {
    const int kind = kind_of(params[k].element_type());
    if (kind < 0) return false;
    const void* data = params[k].untyped_data();
    if (kind == kF32 || !c.has[k]) {
      P->p[k] = static_cast<const float*>(data);
      continue;
    }
    const int64_t size = int64_t(params[k].element_count());
    storage[k].resize(size_t(size));
    for (int64_t i = 0; i < size; ++i) {
      storage[k][size_t(i)] = kind == kBF16 ? load<kBF16>(data, i) : load<kF16>(data, i);
    }
    P->p[k] = storage[k].data();
  }
  return true;
}

// The configuration and float32 parameter rows of one call (shared by both handlers).
ffi::Error prepare(const ffi::AnyBuffer& x, const ffi::AnyBuffer* params, const NormAttrs& a, Config* c,
                   std::vector<float>* storage, Params* P) {
  ffi::Error err = make_config(x, params, a, c);
  if (err.failure()) return err;
  if (!params_of(*c, params, storage, P)) {
    return ffi::Error::InvalidArgument("jln native kernels: parameters must be float32, bfloat16 or float16");
  }
  return ffi::Error::Success();
}

// The forward of both handlers: the norm of the source's rows (x, or s = x + residual).
ffi::Error forward(ffi::ThreadPool& pool, const ffi::AnyBuffer& x, const ffi::AnyBuffer* params, const NormAttrs& a,
                   const Src in, ffi::AnyBuffer& y, ffi::AnyBuffer& mean, ffi::AnyBuffer& rstd) {
  Config c;
  std::vector<float> storage[kParams];
  Params P;
  ffi::Error err = prepare(x, params, a, &c, storage, &P);
  if (err.failure()) return err;
  return dispatch2<Fwd>(kind_of(x.element_type()), kind_of(y.element_type()), pool, c, in, P, y.untyped_data(),
                        static_cast<float*>(mean.untyped_data()), static_cast<float*>(rstd.untyped_data()));
}

ffi::Error NormFwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer w, ffi::AnyBuffer b,
                   ffi::AnyBuffer shift, ffi::AnyBuffer mscale, NormAttrs a,
                   ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                   ffi::Result<ffi::AnyBuffer> rstd) {
  const ffi::AnyBuffer params[kParams] = {w, b, shift, mscale};
  return forward(pool, x, params, a, Src{x.untyped_data(), nullptr, nullptr}, *y, *mean, *rstd);
}

// The fused residual step: s = x + residual (x, residual and s share one dtype), then the
// norm of s, in one sweep over the rows.
ffi::Error NormAddFwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer residual, ffi::AnyBuffer w,
                      ffi::AnyBuffer b, ffi::AnyBuffer shift, ffi::AnyBuffer mscale, NormAttrs a,
                      ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> s,
                      ffi::Result<ffi::AnyBuffer> mean, ffi::Result<ffi::AnyBuffer> rstd) {
  if (residual.element_type() != x.element_type() || s->element_type() != x.element_type() ||
      residual.element_count() != x.element_count() || s->element_count() != x.element_count()) {
    return ffi::Error::InvalidArgument("jln native kernels: x, the residual and s must share dtype and size");
  }
  const ffi::AnyBuffer params[kParams] = {w, b, shift, mscale};
  return forward(pool, x, params, a, Src{x.untyped_data(), residual.untyped_data(), s->untyped_data()}, *y, *mean,
                 *rstd);
}

ffi::Error NormBwd(ffi::ThreadPool pool, ffi::AnyBuffer ct, ffi::AnyBuffer x, ffi::AnyBuffer w,
                   ffi::AnyBuffer b, ffi::AnyBuffer shift, ffi::AnyBuffer mscale,
                   ffi::AnyBuffer mean, ffi::AnyBuffer rstd, NormAttrs a,
                   ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dw,
                   ffi::Result<ffi::AnyBuffer> db, ffi::Result<ffi::AnyBuffer> dshift,
                   ffi::Result<ffi::AnyBuffer> dmscale) {
  const ffi::AnyBuffer params[kParams] = {w, b, shift, mscale};
  Config c;
  std::vector<float> storage[kParams];
  Params P;
  ffi::Error err = prepare(x, params, a, &c, storage, &P);
  if (err.failure()) return err;
  float* const dp[kParams] = {static_cast<float*>(dw->untyped_data()), static_cast<float*>(db->untyped_data()),
                              static_cast<float*>(dshift->untyped_data()),
                              static_cast<float*>(dmscale->untyped_data())};
  return dispatch2<Bwd>(kind_of(x.element_type()), kind_of(ct.element_type()), pool, c,
                        ct.untyped_data(), x.untyped_data(), P,
                        static_cast<const float*>(mean.untyped_data()),
                        static_cast<const float*>(rstd.untyped_data()), dx->untyped_data(), dp);
}

#endif  // JLN_MAIN
}  // namespace

#if !defined(JLN_SPLIT) || defined(JLN_MAIN)
#ifdef JLN_SPLIT
using namespace jln_cpu;
#endif

// Attributes travel as one dictionary, decoded into NormAttrs by name.
XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(NormAttrs, ::xla::ffi::StructMember<float>("eps"),
                                      ::xla::ffi::StructMember<float>("offset"),
                                      ::xla::ffi::StructMember<int32_t>("center"),
                                      ::xla::ffi::StructMember<int32_t>("gemma"),
                                      ::xla::ffi::StructMember<int32_t>("round_h"),
                                      ::xla::ffi::StructMember<int32_t>("round_y"),
                                      ::xla::ffi::StructMember<int32_t>("round_b"),
                                      ::xla::ffi::StructMember<int32_t>("round_f"),
                                      ::xla::ffi::StructMember<int32_t>("round_s"),
                                      ::xla::ffi::StructMember<int32_t>("round_m"),
                                      ::xla::ffi::StructMember<int32_t>("has_scale"),
                                      ::xla::ffi::StructMember<int32_t>("has_bias"),
                                      ::xla::ffi::StructMember<int32_t>("has_shift"),
                                      ::xla::ffi::StructMember<int32_t>("has_mscale"),
                                      ::xla::ffi::StructMember<int32_t>("threads"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JlnNormFwd, NormFwd,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // scale
                                  .Arg<ffi::AnyBuffer>()  // bias
                                  .Arg<ffi::AnyBuffer>()  // shift
                                  .Arg<ffi::AnyBuffer>()  // mscale
                                  .Attrs<NormAttrs>()
                                  .Ret<ffi::AnyBuffer>()   // y
                                  .Ret<ffi::AnyBuffer>()   // hi (the row mean rounded to one float)
                                  .Ret<ffi::AnyBuffer>());  // rstd

XLA_FFI_DEFINE_HANDLER_SYMBOL(JlnNormAddFwd, NormAddFwd,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // residual
                                  .Arg<ffi::AnyBuffer>()  // scale
                                  .Arg<ffi::AnyBuffer>()  // bias
                                  .Arg<ffi::AnyBuffer>()  // shift
                                  .Arg<ffi::AnyBuffer>()  // mscale
                                  .Attrs<NormAttrs>()
                                  .Ret<ffi::AnyBuffer>()   // y
                                  .Ret<ffi::AnyBuffer>()   // s = x + residual
                                  .Ret<ffi::AnyBuffer>()   // hi (the row mean rounded to one float)
                                  .Ret<ffi::AnyBuffer>());  // rstd

XLA_FFI_DEFINE_HANDLER_SYMBOL(JlnNormBwd, NormBwd,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // ct
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // scale
                                  .Arg<ffi::AnyBuffer>()  // bias
                                  .Arg<ffi::AnyBuffer>()  // shift
                                  .Arg<ffi::AnyBuffer>()  // mscale
                                  .Arg<ffi::AnyBuffer>()  // m
                                  .Arg<ffi::AnyBuffer>()  // rstd
                                  .Attrs<NormAttrs>()
                                  .Ret<ffi::AnyBuffer>()   // dx
                                  .Ret<ffi::AnyBuffer>()   // dscale
                                  .Ret<ffi::AnyBuffer>()   // dbias
                                  .Ret<ffi::AnyBuffer>()   // dshift
                                  .Ret<ffi::AnyBuffer>());  // dmscale
#endif  // JLN_MAIN
