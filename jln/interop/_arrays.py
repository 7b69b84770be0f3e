"""Tensor <-> array conversion that keeps dtypes and values bit for bit.

torch is imported inside the functions only: importing :mod:`jln.interop` must not import it.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def import_torch(fn: str) -> Any:
    """Import torch, or raise an ``ImportError`` that says how to install it."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise ImportError(
            f"{fn} needs PyTorch, which is an optional dependency of jln. Install it with "
            f"`pip install 'jln[torch]'` (or `pip install torch`)."
        ) from e
    return torch


def to_jax(t: Any, name: str, fn: str) -> jax.Array:
    """A torch tensor (any device) as a JAX array of the same dtype, values bit-exact."""
    torch = import_torch(fn)
    t = t.detach()
    if t.device.type == "meta":
        raise ValueError(
            f"{fn}: parameter `{name}` is on the meta device (no values); load the checkpoint "
            f"into the torch module first (e.g. module.to_empty(device='cpu') then load_state_dict)."
        )
    if not t.is_floating_point():
        raise TypeError(f"{fn}: parameter `{name}` has non-floating dtype {t.dtype}.")
    if t.dtype == torch.float64 and jax.dtypes.canonicalize_dtype(jnp.float64) != jnp.float64:
        raise ValueError(
            f"{fn}: parameter `{name}` is float64 but JAX's 64-bit mode is off, so it would be "
            f"silently rounded to float32. Enable it with jax.config.update('jax_enable_x64', "
            f"True), or cast the torch module with module.float() first."
        )
    t = t.cpu().contiguous()
    if t.dtype == torch.bfloat16:
        # numpy has no bfloat16: go through float32, which holds every bfloat16 value exactly
        return jnp.asarray(t.float().numpy(), dtype=jnp.bfloat16)
    return jnp.asarray(t.numpy())


def to_torch(a: Any, name: str, fn: str) -> Any:
    """A JAX (or NumPy) array as a CPU torch tensor of the same dtype, values bit-exact."""
    torch = import_torch(fn)
    arr = np.asarray(jax.device_get(a))
    if arr.dtype == jnp.bfloat16:
        return torch.from_numpy(arr.astype(np.float32)).to(torch.bfloat16)
    if np.issubdtype(arr.dtype, np.integer) and arr.ndim == 0:  # a counter (num_batches_tracked)
        return torch.tensor(int(arr), dtype=torch.int64)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{fn}: parameter `{name}` has non-floating dtype {arr.dtype}.")
    return torch.from_numpy(np.array(arr, copy=True))
