"""jln's kernels under jax.export and on another platform, on the machine this runs on.

Under ``impl="auto"`` the computation takes the platform's kernels (the Pallas kernels on a
GPU, the native kernels on a CPU); exported, serialized and deserialized, it must run the XLA
body they implement: the XLA path's forward bit for bit, its gradient to within a few ulps.
On a machine with an accelerator the same jitted function, given an array on the host CPU,
must run there (the XLA body). Prints one line per check; exit status 1 if any fails.

    python bench/gpu_export.py
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

import jln


def _round_trip(exported: jax.export.Exported) -> tuple[jax.export.Exported, bool]:
    """``exported`` serialized and read back, where ``flatbuffers`` (which serialization needs)
    is installed; else as it is."""
    try:
        return jax.export.deserialize(exported.serialize()), True
    except ImportError:
        return exported, False


def main() -> int:
    k = jax.random.split(jax.random.key(0), 3)
    x = (2.0 + jax.random.normal(k[0], (64, 8, 1024), jnp.float32)).astype(jnp.bfloat16)
    w = (1 + 0.1 * jax.random.normal(k[1], (1024,), jnp.float32)).astype(jnp.bfloat16)
    b = (0.1 * jax.random.normal(k[2], (1024,), jnp.float32)).astype(jnp.bfloat16)
    ops = {
        "layer_norm": lambda x, impl: jln.layer_norm(x, w, b, impl=impl),
        "add_layer_norm": lambda x, impl: jln.add_layer_norm(x, jnp.flip(x, -1), w, b, impl=impl)[0],
        "rms_norm/llama": lambda x, impl: jln.rms_norm(x, w, convention="llama", impl=impl),
    }
    backend = jax.default_backend()
    cpus = jax.devices("cpu") if backend != "cpu" else []
    failed = 0
    for name, f in ops.items():
        fwd = jax.jit(lambda x, f=f: f(x, "auto"))
        grad = jax.jit(jax.grad(lambda x, f=f: jnp.sum(jnp.sin(f(x, "auto").astype(jnp.float32)))))
        want_y = f(x, "xla")
        want_dx = jax.grad(lambda x, f=f: jnp.sum(jnp.sin(f(x, "xla").astype(jnp.float32))))(x)
        text = fwd.lower(x).as_text()
        kernel = "triton" if "triton" in text else "native" if "jln_cpu_norm" in text else "none"
        exp_fwd, serialized = _round_trip(jax.export.export(fwd)(x))
        exp_y = exp_fwd.call(x)
        exp_dx = _round_trip(jax.export.export(grad)(x))[0].call(x)
        same_y = bool(jnp.all(exp_y == want_y))
        dx_err = float(jnp.max(jnp.abs(exp_dx.astype(jnp.float32) - want_dx.astype(jnp.float32))))
        dx_ok = dx_err <= 2 ** -6 * float(jnp.max(jnp.abs(want_dx.astype(jnp.float32))))
        line = (f"{name}: {backend}, jit takes kernel={kernel}; exported ({'' if serialized else 'not '}serialized) "
                f"y == xla: {same_y}; exported dx max err {dx_err:.3g}")
        ok = same_y and dx_ok
        if cpus:
            xc = jax.device_put(x, cpus[0])
            host = fwd(xc)
            same_host = bool(jnp.all(host == f(xc, "xla")))
            line += f"; jitted on the host CPU == xla there: {same_host}"
            ok = ok and same_host
        failed += not ok
        print(("ok   " if ok else "FAIL ") + line, flush=True)
    print(f"gpu_export: {len(ops) - failed} of {len(ops)} ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
