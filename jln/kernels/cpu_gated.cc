// jln's native CPU kernels for gated RMSNorm (Mamba-2's and the hybrid models' output norm),
// forward and backward, as XLA FFI handlers. Built by `jln build` with cpu_norm.cc into one
// library (jln/kernels/_cpu_build.py); called from jln/kernels/_cpu_gated.py.
//
// Contract (the XLA body of jln._contract.gated_rms_norm.GatedRMSNormSpec on [rows, n], which
// jln's tests compare these kernels against):
//   x and the gate z [rows, n] share one dtype (float32, bfloat16 or float16); the weight w
//   arrives as [groups, n] in its own dtype of the three (widened exactly to float32 once per
//   call; rows split into `groups` equal consecutive blocks, as cpu_norm.cc's parameters);
//   statistics in float32.
//   a(z) = z / (1 + exp(-z)) (silu) or 1 / (1 + exp(-z)) (sigmoid): torch's kernel formulas;
//   exp is vexp below (within an ulp or two of XLA's exp, so a gate's value may differ from
//   the XLA path's in its last float32 bit).
//   v = x * a(z) when the gate comes first (gate_first), else x.
//   Per group of gs consecutive columns (gs = n: the whole row):
//     rstd = 1 / sqrt(sum(v * v) / gs + eps), h = v * rstd,
//   then h1 = round(h, round_h), h3 = round(h1 * w, round_y) (h1 without a weight),
//   y = h3 * a(z) when the gate comes after (gate_after), else h3; stored in y's dtype.
//   round(v, k) is cpu_norm.cc's rounding step (bfloat16 k = 1, float16 k = 2, none k = 0).
// Backward, for a cotangent ct of y (every rounding step rounds the cotangent through it):
//   c = ct; [gate after] dz = (c * h3) * a'(z), c = c * a(z);
//   [weight] c = round(c, round_y), dw += c * h1, c = c * w; c = round(c, round_h);
//   dv = rstd * (c - h * mean_group(h * c));
//   [gate first] dx = dv * a(z), dz = (dv * x) * a'(z); else dx = dv.
//   a'(z) = s * (1 + z * (1 - s)) (silu) or s * (1 - s) (sigmoid), s = 1 / (1 + exp(-z)):
//   finite at every z, as the XLA path's rule (which takes s from exp(-|z|), so the two may
//   differ in s's last bit for z < 0, and below z = -88.7 where this s is 0 and XLA's < 2^-128).
// The weight's gradient accumulates in float64 per worker and is returned as float32.

#include "cpu_simd.h"

JLN_NAMESPACE {
namespace gated {

// exp for 16 lanes: n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts, Cody and Waite),
// exp(r) by its Taylor polynomial to r^7 (|r| <= ln(2)/2: truncation below 6e-9 relative), times
// 2^n as two exact power-of-two factors (so 2^128 and subnormal results need no special case).
// x is clamped to [-104, 89] first, where the result has already rounded to 0 or overflowed to
// infinity; NaN stays NaN.
inline vf vexp(vf x) {
  const vf lo = vf{} - 104.0f, hi = vf{} + 89.0f;
  vf xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const vf nf = (xc * 1.44269504088896341f + magic) - magic;
  const vf r = (xc - nf * 0.693145751953125f) - nf * 1.428606765330187045e-06f;
  vf p = vf{} + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const vi n = __builtin_convertvector(nf, vi);
  const vi n1 = n >> 1, n2 = n - n1;
  const vf s1 = reinterpret_cast<vf>(reinterpret_cast<vu>(n1 + 127) << 23);
  const vf s2 = reinterpret_cast<vf>(reinterpret_cast<vu>(n2 + 127) << 23);
  return (p * s1) * s2;
}

enum Act : int { kSilu = 0, kSigmoid = 1 };

// a(z): torch's formula, z / (1 + exp(-z)) or 1 / (1 + exp(-z))
inline vf act(vf z, int a) {
  const vf d = 1.0f + vexp(-z);
  return a == kSilu ? z / d : 1.0f / d;
}

// a(z) and a'(z), from one exp: s = 1 / (1 + exp(-z)) is the sigmoid's value at every z (it
// is 0 only where exp(-z) overflows, z < -88.7, where the sigmoid is below 2^-128)
inline void act_grad(vf z, int a, vf* value, vf* slope) {
  const vf d = 1.0f + vexp(-z);
  const vf s = 1.0f / d;
  *value = a == kSilu ? z / d : s;
  *slope = a == kSilu ? s * (1.0f + z * (1.0f - s)) : s * (1.0f - s);
}

// Lanes j..j+m-1 (m <= 16) of an array of dtype K as float32, zeros past m; and their store.
// A row's last partial vector goes through the same arithmetic as the others this way.
template <int K>
inline vf vload_part(const void* p, int64_t i, int64_t m) {
  if (m == V) return vload<K>(p, i);
  float t[V] = {};
  for (int64_t l = 0; l < m; ++l) t[l] = load<K>(p, i + l);
  return vload<kF32>(t, 0);
}
template <int K>
inline void vstore_part(void* p, int64_t i, int64_t m, vf v) {
  if (m == V) return vstore<K>(p, i, v);
  float t[V];
  vstore<kF32>(t, 0, v);
  for (int64_t l = 0; l < m; ++l) store<K>(p, i + l, t[l]);
}

struct Config {
  float eps;
  int64_t rows, n, gs, per;  // per: rows per weight group
  int act, round_h, round_y;
  bool gate_first, gate_after, has_w;
  int64_t threads;
  int64_t groups_per_row() const { return n / gs; }
  int64_t wgroup(int64_t r) const { return per == rows ? 0 : r / per; }
};

// sum over a group's vectors (j0 <= j < j1, vectors of 16 from j0) of f(j, m): four
// accumulators in a fixed order, the partial last vector (zeros past m) in the first.
template <typename F>
inline float group_sum(int64_t j0, int64_t j1, F f) {
  vf a[4] = {};
  int k = 0;
  for (int64_t j = j0; j < j1; j += V, k = (k + 1) & 3) a[k] += f(j, std::min<int64_t>(V, j1 - j));
  return hsum((a[0] + a[1]) + (a[2] + a[3]));
}

// Rows r0..r1 of the forward. `v` is a float32 scratch row (the gated row, gate first).
template <int KX, int KY>
void fwd_rows(const Config& c, const void* x, const void* z, const float* W, void* y, float* rstd, int64_t r0,
              int64_t r1) {
  const int64_t n = c.n, gs = c.gs, G = c.groups_per_row();
  std::vector<float> vbuf(static_cast<size_t>(c.gate_first ? n : 0));
  float* v = vbuf.data();
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * n;
    const float* w = c.has_w ? W + c.wgroup(r) * n : nullptr;
    // the row's first sweep hints the next row of x and z into cache, its output sweep the
    // next row of y for writing (as cpu_norm.cc's forwards: the hardware prefetcher alone
    // leaves memory idle during a row's arithmetic)
    if (c.gate_first) {
      for (int64_t j = 0; j < n; j += V) {
        const int64_t m = std::min<int64_t>(V, n - j);
        prefetch<KX, false>(x, o + n + j);
        prefetch<KX, false>(z, o + n + j);
        const vf gv = vload_part<KX>(x, o + j, m) * act(vload_part<KX>(z, o + j, m), c.act);
        vstore_part<kF32>(v, j, m, gv);
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      const int64_t j0 = g * gs, j1 = j0 + gs;
      auto row = [&](int64_t j, int64_t m) { return c.gate_first ? vload_part<kF32>(v, j, m) : vload_part<KX>(x, o + j, m); };
      const float ss = group_sum(j0, j1, [&](int64_t j, int64_t m) {
        if (!c.gate_first) {
          prefetch<KX, false>(x, o + n + j);
          prefetch<KX, false>(z, o + n + j);
        }
        const vf e = row(j, m);
        return e * e;
      });
      const float rs = 1.0f / std::sqrt(ss / float(gs) + c.eps);
      rstd[r * G + g] = rs;
      for (int64_t j = j0; j < j1; j += V) {
        const int64_t m = std::min<int64_t>(V, j1 - j);
        prefetch<KY, true>(y, o + n + j);
        vf h = vround(row(j, m) * rs, c.round_h);
        if (w) h = vround(h * vload_part<kF32>(w, j, m), c.round_y);
        if (c.gate_after) h = h * act(vload_part<KX>(z, o + j, m), c.act);
        vstore_part<KY>(y, o + j, m, h);
      }
    }
  }
}

// Rows r0..r1 of the backward; the weight's gradient is added to dw (float64, [groups, n]).
template <int KX, int KY>
void bwd_rows(const Config& c, const void* ct, const void* x, const void* z, const float* W, const float* rstd,
              void* dx, void* dz, double* dw, int64_t r0, int64_t r1) {
  const int64_t n = c.n, gs = c.gs, G = c.groups_per_row();
  const bool gated = c.gate_first || c.gate_after;
  const size_t row = static_cast<size_t>(n), arow = gated ? row : 0;
  std::vector<float> hbuf(row), gbuf(row), abuf(arow), sbuf(arow), part(c.has_w ? row : 0);
  float *hb = hbuf.data(), *gb = gbuf.data(), *ab = abuf.data(), *sb = sbuf.data(), *dwp = part.data();
  int64_t part_group = -1;
  auto flush = [&]() {
    if (part_group < 0) return;
    double* acc = dw + part_group * n;
    for (int64_t j = 0; j < n; ++j) {
      acc[j] += double(dwp[j]);
      dwp[j] = 0.0f;
    }
  };
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * n;
    const float* w = c.has_w ? W + c.wgroup(r) * n : nullptr;
    if (w && c.wgroup(r) != part_group) {
      flush();
      part_group = c.wgroup(r);
    }
    for (int64_t g = 0; g < G; ++g) {
      const int64_t j0 = g * gs, j1 = j0 + gs;
      const float rs = rstd[r * G + g];
      // the cotangent of h, and h, into gb and hb; the gate's value and slope into ab and sb
      const float shg = group_sum(j0, j1, [&](int64_t j, int64_t m) {
        prefetch<KX, false>(x, o + n + j);
        prefetch<KX, false>(z, o + n + j);
        prefetch<KY, false>(ct, o + n + j);
        vf a = {}, s = {};
        if (gated) {
          act_grad(vload_part<KX>(z, o + j, m), c.act, &a, &s);
          vstore_part<kF32>(ab, j, m, a);
          vstore_part<kF32>(sb, j, m, s);
        }
        vf v = vload_part<KX>(x, o + j, m);
        if (c.gate_first) v = v * a;
        const vf h = v * rs;
        const vf h1 = vround(h, c.round_h);
        vf cv = vload_part<KY>(ct, o + j, m);
        if (c.gate_after) {
          const vf h3 = w ? vround(h1 * vload_part<kF32>(w, j, m), c.round_y) : h1;
          vstore_part<KX>(dz, o + j, m, (cv * h3) * s);
          cv = cv * a;
        }
        if (w) {
          cv = vround(cv, c.round_y);
          vstore_part<kF32>(dwp, j, m, vload_part<kF32>(dwp, j, m) + cv * h1);
          cv = cv * vload_part<kF32>(w, j, m);
        }
        cv = vround(cv, c.round_h);
        vstore_part<kF32>(gb, j, m, cv);
        vstore_part<kF32>(hb, j, m, h);
        return h * cv;
      });
      const float mhg = shg / float(gs);
      for (int64_t j = j0; j < j1; j += V) {
        const int64_t m = std::min<int64_t>(V, j1 - j);
        prefetch<KX, true>(dx, o + n + j);
        if (gated) prefetch<KX, true>(dz, o + n + j);
        const vf dv = rs * (vload_part<kF32>(gb, j, m) - vload_part<kF32>(hb, j, m) * mhg);
        if (c.gate_first) {
          vstore_part<KX>(dx, o + j, m, dv * vload_part<kF32>(ab, j, m));
          vstore_part<KX>(dz, o + j, m, (dv * vload_part<KX>(x, o + j, m)) * vload_part<kF32>(sb, j, m));
        } else {
          vstore_part<KX>(dx, o + j, m, dv);
        }
      }
    }
  }
  flush();
}

template <int KX, int KY>
ffi::Error forward(ffi::ThreadPool& pool, const Config& c, const void* x, const void* z, const float* w, void* y,
                   float* rstd) {
  parallel_rows(pool, c.rows, c.n, pool_workers(pool, c.threads), [&](int64_t r0, int64_t r1, int64_t) {
    fwd_rows<KX, KY>(c, x, z, w, y, rstd, r0, r1);
  });
  return ffi::Error::Success();
}

template <int KX, int KY>
ffi::Error backward(ffi::ThreadPool& pool, const Config& c, const void* ct, const void* x, const void* z,
                    const float* w, const float* rstd, void* dx, void* dz, float* dw, int64_t wsize) {
  const int64_t nw = pool_workers(pool, c.threads);
  std::vector<std::vector<double>> acc(size_t(nw), std::vector<double>(size_t(c.has_w ? wsize : 0), 0.0));
  parallel_rows(pool, c.rows, c.n, nw, [&](int64_t r0, int64_t r1, int64_t slot) {
    bwd_rows<KX, KY>(c, ct, x, z, w, rstd, dx, dz, acc[size_t(slot)].data(), r0, r1);
  });
  for (int64_t i = 0; i < wsize; ++i) {
    double s = 0.0;
    if (c.has_w) {
      for (int64_t k = 0; k < nw; ++k) s += acc[size_t(k)][size_t(i)];
    }
    dw[i] = float(s);
  }
  return ffi::Error::Success();
}

// x's dtype, and y's (the cotangent's) among float32, bfloat16, float16: KX x KY instances
template <typename Fn>
ffi::Error dispatch(int kx, int ky, Fn&& fn) {
#define JLN_CASE(X, Y) \
  if (kx == X && ky == Y) return fn(std::integral_constant<int, X>(), std::integral_constant<int, Y>());
  JLN_CASE(kF32, kF32) JLN_CASE(kF32, kBF16) JLN_CASE(kF32, kF16)
  JLN_CASE(kBF16, kF32) JLN_CASE(kBF16, kBF16) JLN_CASE(kBF16, kF16)
  JLN_CASE(kF16, kF32) JLN_CASE(kF16, kBF16) JLN_CASE(kF16, kF16)
#undef JLN_CASE
  return ffi::Error::InvalidArgument("jln gated kernels take float32, bfloat16 or float16");
}

struct Attrs {
  float eps;
  int32_t group_size, act, gate_first, gate_after, has_w, round_h, round_y, threads;
};

ffi::Error configure(const ffi::AnyBuffer& x, const ffi::AnyBuffer& z, const ffi::AnyBuffer& w, const Attrs& a,
                     Config* c) {
  auto dims = x.dimensions();
  if (dims.size() < 1 || dims.back() <= 0) return ffi::Error::InvalidArgument("jln gated kernels: empty rows");
  c->n = dims.back();
  c->rows = int64_t(x.element_count()) / c->n;
  c->gs = a.group_size > 0 ? a.group_size : c->n;
  if (c->n % c->gs) return ffi::Error::InvalidArgument("jln gated kernels: group_size must divide the width");
  c->eps = a.eps;
  c->act = a.act;
  c->gate_first = a.gate_first != 0;
  c->gate_after = a.gate_after != 0;
  c->has_w = a.has_w != 0;
  c->round_h = a.round_h;
  c->round_y = a.round_y;
  c->threads = a.threads;
  c->per = c->rows;
  if ((c->gate_first || c->gate_after) &&
      (z.element_type() != x.element_type() || z.element_count() != x.element_count())) {
    return ffi::Error::InvalidArgument("jln gated kernels: the gate must have x's dtype and size");
  }
  if (c->has_w) {
    const int64_t groups = int64_t(w.element_count()) / c->n;
    if (kind_of(w.element_type()) < 0 || groups < 1 || groups * c->n != int64_t(w.element_count()) ||
        c->rows % groups) {
      return ffi::Error::InvalidArgument("jln gated kernels: the weight must be [groups, n], groups dividing the rows");
    }
    c->per = c->rows / groups;
  }
  return ffi::Error::Success();
}

// The weight as float32: its own data, or widened into `storage` (it is O(groups * n)).
const float* weight_of(const Config& c, const ffi::AnyBuffer& w, std::vector<float>* storage) {
  const int kind = kind_of(w.element_type());
  if (!c.has_w || kind == kF32) return static_cast<const float*>(w.untyped_data());
  const int64_t size = int64_t(w.element_count());
  storage->resize(size_t(size));
  for (int64_t i = 0; i < size; ++i) {
    (*storage)[size_t(i)] = kind == kBF16 ? load<kBF16>(w.untyped_data(), i) : load<kF16>(w.untyped_data(), i);
  }
  return storage->data();
}

ffi::Error Fwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer z, ffi::AnyBuffer w, Attrs a,
               ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> rstd) {
  Config c;
  ffi::Error err = configure(x, z, w, a, &c);
  if (err.failure()) return err;
  std::vector<float> storage;
  const float* wf = weight_of(c, w, &storage);
  return dispatch(kind_of(x.element_type()), kind_of(y->element_type()), [&](auto kx, auto ky) {
    return forward<decltype(kx)::value, decltype(ky)::value>(
        pool, c, x.untyped_data(), z.untyped_data(), wf, y->untyped_data(),
        static_cast<float*>(rstd->untyped_data()));
  });
}

ffi::Error Bwd(ffi::ThreadPool pool, ffi::AnyBuffer ct, ffi::AnyBuffer x, ffi::AnyBuffer z, ffi::AnyBuffer w,
               ffi::AnyBuffer rstd, Attrs a, ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dz,
               ffi::Result<ffi::AnyBuffer> dw) {
  Config c;
  ffi::Error err = configure(x, z, w, a, &c);
  if (err.failure()) return err;
  if (!(c.gate_first || c.gate_after)) {  // no gate: its gradient is the placeholder's zeros
    std::memset(dz->untyped_data(), 0, dz->size_bytes());
  }
  std::vector<float> storage;
  const float* wf = weight_of(c, w, &storage);
  return dispatch(kind_of(x.element_type()), kind_of(ct.element_type()), [&](auto kx, auto ky) {
    return backward<decltype(kx)::value, decltype(ky)::value>(
        pool, c, ct.untyped_data(), x.untyped_data(), z.untyped_data(), wf,
        static_cast<const float*>(rstd.untyped_data()), dx->untyped_data(), dz->untyped_data(),
        static_cast<float*>(dw->untyped_data()), int64_t(dw->element_count()));
  });
}

}  // namespace gated
}  // namespace

#ifdef JLN_SPLIT
using namespace jln_cpu;
#endif

XLA_FFI_REGISTER_STRUCT_ATTR_DECODING(gated::Attrs, ::xla::ffi::StructMember<float>("eps"),
                                      ::xla::ffi::StructMember<int32_t>("group_size"),
                                      ::xla::ffi::StructMember<int32_t>("act"),
                                      ::xla::ffi::StructMember<int32_t>("gate_first"),
                                      ::xla::ffi::StructMember<int32_t>("gate_after"),
                                      ::xla::ffi::StructMember<int32_t>("has_w"),
                                      ::xla::ffi::StructMember<int32_t>("round_h"),
                                      ::xla::ffi::StructMember<int32_t>("round_y"),
                                      ::xla::ffi::StructMember<int32_t>("threads"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JlnGatedFwd, gated::Fwd,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // gate
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Attrs<gated::Attrs>()
                                  .Ret<ffi::AnyBuffer>()   // y
                                  .Ret<ffi::AnyBuffer>());  // rstd [rows, n / group_size]

XLA_FFI_DEFINE_HANDLER_SYMBOL(JlnGatedBwd, gated::Bwd,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // ct
                                  .Arg<ffi::AnyBuffer>()  // x
                                  .Arg<ffi::AnyBuffer>()  // gate
                                  .Arg<ffi::AnyBuffer>()  // weight
                                  .Arg<ffi::AnyBuffer>()  // rstd
                                  .Attrs<gated::Attrs>()
                                  .Ret<ffi::AnyBuffer>()   // dx
                                  .Ret<ffi::AnyBuffer>()   // dgate
                                  .Ret<ffi::AnyBuffer>());  // dweight (float32)
