"""A user's mistakes: each line marked `# error` must be flagged, and only those (checked, never run)."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

import jln
from jln import linen as jnn
from jln import nnx as jnnx
from jln.flax import linen as jfl
from jln.flax import nnx as jfx

x = jnp.ones((2, 64))
w = jnp.ones(64)
rngs = nnx.Rngs(0)

# functions
jln.rms_norm(x, convention="lama")  # error: misspelt convention
jln.add_rms_norm(x, x, w, convention="gema")  # error: misspelt convention
jln.gated_rms_norm(x, x, w, convention="qwen3next")  # error: misspelt convention
jln.layer_norm(x, convention="torc")  # error: misspelt convention
jln.layer_norm(x, epss=1e-6)  # error: typo'd keyword
jln.rms_norm(x, w, epsilon=1e-6)  # error: flax's keyword, not jln's
jln.layer_norm(x, eps="1e-6")  # error: wrong type
jln.group_norm(x, "4")  # error: wrong type
jln.rms_norm(x, w, 1e-6)  # error: too many positional arguments
jln.lp_normalize(x, 2.0)  # error: too many positional arguments

# linen
jnn.RMSNorm(epss=1e-6)  # error: typo'd keyword
jnn.RMSNorm(eps="1e-6")  # error: wrong type
jnn.RMSNorm(convention="lama")  # error: misspelt convention
jnn.LayerNorm(convention="torc")  # error: misspelt convention
jnn.GatedRMSNorm(convention="mamba_2")  # error: misspelt convention
jnn.LayerNorm(use_bias="yes")  # error: wrong type
jnn.GroupNorm(num_groups="4", num_channels=16)  # error: wrong type
jnn.AdaLNZero(featurs=64)  # error: typo'd keyword
jnn.RMSNorm()(x, x)  # error: too many call arguments

# nnx
jnnx.RMSNorm(64, epss=1e-6)  # error: typo'd keyword
jnnx.RMSNorm(64, eps="1e-6")  # error: wrong type
jnnx.LayerNorm(64, use_bias="yes")  # error: wrong type
jnnx.RMSNorm(64, convention="lama")  # error: misspelt convention
jnnx.LayerNorm(64, convention="torc")  # error: misspelt convention
jnnx.GatedRMSNorm(64, convention="qwen3next")  # error: misspelt convention
jnnx.LayerNorm("64")  # error: wrong positional type for the size
jnnx.BatchNorm(16.0)  # error: wrong positional type for the size
jnnx.AdaLNZero("32", 64, rngs=rngs)  # error: wrong positional type for the size
jnnx.RMSNorm(64, 1e-6)  # error: an option passed positionally
jnnx.RMSNorm(64, rngs=rngs)(x, x)  # error: too many call arguments

# jln.flax (flax's namespaces: its names and signatures are checked as flax's)
jfl.Dens(4)  # error: a name flax.linen does not have
jfl.GroupNorm(num_group=4)  # error: typo'd keyword
jfl.BatchNorm(momentum="0.9")  # error: wrong type
jfl.InstanceNorm(eps=1e-6)  # error: jln's keyword, not flax's
jfx.Linaer(4, 4, rngs=rngs)  # error: a name flax.nnx does not have
jfx.GroupNorm(16, num_group=4, rngs=rngs)  # error: typo'd keyword
jfx.BatchNorm("16", rngs=rngs)  # error: wrong positional type for the size
