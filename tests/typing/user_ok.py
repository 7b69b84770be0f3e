"""A user's model on jln's faces: every line is correct and must check clean (and run)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx
from typing_extensions import assert_type  # typing's from Python 3.11 on

import jln
from jln import linen as jnn
from jln import nnx as jnnx
from jln.flax import linen as jfl  # flax.linen with jln's norms
from jln.flax import nnx as jfx  # flax.nnx with jln's norms

Array = jax.Array
x = jnp.ones((2, 8, 64))
c = jnp.ones((2, 32))
img = jnp.ones((2, 4, 4, 16))  # NHWC
w, b, ch = jnp.ones(64), jnp.zeros(64), jnp.ones(16)

# functions
assert_type(jln.layer_norm(x, w, b, eps=1e-6), Array)
assert_type(jln.layer_norm(x, w, convention="deberta", zero_centered=True), Array)
assert_type(jln.add_layer_norm(x, x, w, b, residual_in_fp32=True), tuple[Array, Array])
assert_type(jln.rms_norm(x, w, convention="llama", eps=1e-6), Array)
assert_type(jln.rms_norm(x, w, convention="gemma"), Array)
assert_type(jln.rms_norm(x, convention="t5", axis=-1), Array)
assert_type(jln.rms_norm(x, w, convention="diffusers", bias=b), Array)
h, res = jln.add_rms_norm(x, x, w, convention="gemma")
assert_type(h, Array)
assert_type(jln.modulate(x, b, w), Array)
parts: dict[str, Array] = jln.split_condition(jnp.ones((2, 6 * 64)), order="dit")
y_ada, mods = jln.adaptive_layer_norm(x, jnp.ones((2, 128)), order="seed")
assert_type(y_ada, Array)
assert_type(mods, dict[str, Array])
y_ars, ars_mods = jln.adaptive_rms_norm(x, jnp.ones((2, 256)), convention="diffusers", modulation="float32")
assert_type(jln.gated_rms_norm(x, x, w, convention="qwen3_next", group_size=32), Array)
assert_type(jln.gated_rms_norm(x, x, w, convention="mamba", norm_before_gate=False), Array)
bn_y, stats = jln.batch_norm(img, ch, ch, training=True, momentum=0.1, channel_axis=-1)
assert_type(stats, jln.RunningStats)
in_y, in_stats = jln.instance_norm(img, channel_axis=-1)
assert_type(jln.group_norm(img, 4, ch, ch, channel_axis=-1, activation="silu"), Array)
assert_type(jln.frozen_batch_norm(img, ch, ch, ch, ch, eps=1e-5, channel_axis=-1), Array)
assert_type(jln.local_response_norm(img, 3, alpha=1e-4, beta=0.75, channel_axis=-1), Array)
assert_type(jln.lp_normalize(x, p=2.0, axis=-1), Array)
assert_type(jln.global_response_norm(img, ch, ch, eps=1e-6), Array)


class Block(nn.Module):
    """A DiT-style block with jln's linen norms."""

    features: int = 64

    @nn.compact
    def __call__(self, h: Array, cond: Array) -> Array:
        a: Array = jnn.RMSNorm(convention="llama", eps=1e-6)(h)
        b: Array = jnn.LayerNorm(eps=1e-5, use_bias=False, convention="torch")(a)
        d: Array = jnn.GatedRMSNorm(convention="mamba", group_size=16)(b, h)
        e: Array = jnn.AdaLNContinuous(features=self.features, norm_type="rms_norm")(d, cond)
        f: Array = jnn.AdaptiveLayerNorm(features=self.features, order="seed")(e, cond)
        x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp = jnn.AdaLNZero(features=self.features)(f, cond)
        g: Array = jnn.DiTBlock(hidden_size=self.features, num_heads=4, mlp_ratio=2.0)(x_mod, nn.Dense(self.features)(cond))
        t: Array = jnn.TransformerEncoderLayer(self.features, 4, 128, dropout=0.0, batch_first=True)(g)
        return t + jnn.LpNorm(p=2.0)(g) + jnn.LocalResponseNorm(size=3, channel_axis=-1)(g)


block = Block()
variables = block.init(jax.random.key(0), x, c)
out = block.apply(variables, x, c)

bn = jnn.BatchNorm(momentum=0.1, channel_axis=-1)
bn_out, updates = bn.apply(bn.init(jax.random.key(0), img), img, mutable=["batch_stats"])
for mod in (
    jnn.GroupNorm(num_groups=4, num_channels=16, channel_axis=-1, activation="silu"),
    jnn.InstanceNorm(affine=True, channel_axis=-1),
    jnn.FrozenBatchNorm(eps=1e-5, channel_axis=-1),
    jnn.GlobalResponseNorm(eps=1e-6),
):
    mod.apply(mod.init(jax.random.key(0), img), img)

rngs = nnx.Rngs(0)
norm = jnnx.RMSNorm(64, convention="gemma", rngs=rngs)
assert_type(norm(x), Array)
scale: nnx.Param[Array] | None = norm.scale
ln = jnnx.LayerNorm(64, eps=1e-5, use_bias=False)
assert_type(ln(x), Array)
gated = jnnx.GatedRMSNorm(64, convention="qwen3_next", group_size=32)
assert_type(gated(x, x), Array)
assert_type(jnnx.AdaLNContinuous(32, 64, norm_type="rms_norm", rngs=rngs)(x, c), Array)
assert_type(jnnx.AdaptiveLayerNorm(32, 64, order="seed", rngs=rngs)(x, c), Array)
z_mod, *chunks = jnnx.AdaLNZero(32, 64, num_chunks=6, rngs=rngs)(x, c)
assert_type(jnnx.DiTBlock(64, 4, mlp_ratio=2.0, rngs=rngs)(x, x[:, 0]), Array)
enc = jnnx.TransformerEncoderLayer(64, 4, 128, 0.0, "gelu", batch_first=True, norm_first=True, rngs=rngs)
assert_type(enc(x), Array)
bnx = jnnx.BatchNorm(16, momentum=0.1, channel_axis=-1)
assert_type(bnx(img), Array)
assert_type(jnnx.InstanceNorm(16, affine=True, channel_axis=-1)(img), Array)
assert_type(jnnx.GroupNorm(4, 16, channel_axis=-1)(img), Array)
assert_type(jnnx.FrozenBatchNorm(16, channel_axis=-1)(img), Array)
assert_type(jnnx.LocalResponseNorm(3, alpha=1e-4, channel_axis=-1)(img), Array)
assert_type(jnnx.LpNorm(p=2.0, axis=-1)(x), Array)
assert_type(jnnx.GlobalResponseNorm(16, eps=1e-6)(img), Array)

# the conditioned norms of model files, both faces
x8, c4, t8 = jnp.ones((2, 5, 8)), jnp.ones((2, 4)), jnp.ones((2, 8))
img8, steps = jnp.ones((2, 8, 4, 4)), jnp.array([1.0, 500.0])
for lin, args in (
    (jnn.AdaLNZeroJoint(features=8, num_chunks=6, activation="silu"), (x8, jnp.ones((2, 3, 8)), c4)),
    (jnn.AdaLNScale(features=8, out_features=3, norm_type="rms_norm"), (x8, c4)),
    (jnn.AdaLNSingle(features=8, use_additional_conditions=False), (steps,)),
    (jnn.AdaGroupNorm(features=8, num_groups=2, activation="silu", proj_name="linear"), (img8, c4)),
    (jnn.AdaLNTable(features=8, order="shift_scale"), (x8, t8, jnp.zeros((2, 8)))),
    (jnn.ModulatedRMSNorm(eps=1e-6), (x8,)),
    (jnn.AdaRMSNorm(features=8, eps=1e-6), (x8, c4)),
    (jnn.AdaLNSigmoidGate(features=8), (x8, jnp.ones((2, 5, 4)))),
):
    lin.apply(lin.init(jax.random.key(0), *args), *args)
x_mod_j, ctx_mod, gate_j, enc_gate = jnnx.AdaLNZeroJoint(4, 8, rngs=rngs)(x8, jnp.ones((2, 3, 8)), c4)
assert_type(jnnx.AdaLNScale(4, 8, out_features=3, rngs=rngs)(x8, c4), Array)
emb6, embedded = jnnx.AdaLNSingle(8, rngs=rngs)(steps)
assert_type(embedded, Array)
assert_type(jnnx.AdaGroupNorm(4, 8, num_groups=2, rngs=rngs)(img8, c4), Array)
assert_type(jnnx.AdaLNTable(8)(x8, t8, jnp.zeros((2, 8))), Array)
assert_type(jnnx.ModulatedRMSNorm(eps=1e-6)(x8, 2 * jnp.ones((2, 1, 8))), Array)
y_ar, gate_ar = jnnx.AdaRMSNorm(4, 8, rngs=rngs)(x8, c4)
assert_type(gate_ar, Array)
assert_type(jnnx.AdaLNSigmoidGate(4, 8, rngs=rngs)(x8, c4), Array)


# jln.flax: flax's own namespaces, jln's five norms in them (the import swap)
class ResBlock(jfl.Module):
    features: int = 16

    @jfl.compact
    def __call__(self, h: Array, train: bool = False) -> Array:
        y = jfl.Conv(self.features, (3, 3))(h)
        y = jfl.BatchNorm(use_running_average=not train, momentum=0.9)(y)
        y = jfl.GroupNorm(num_groups=4, epsilon=1e-5)(jfl.relu(y))
        y = jfl.InstanceNorm(feature_axes=-1)(y) + jfl.LayerNorm(use_fast_variance=False)(y)
        return jfl.Dense(self.features)(jfl.RMSNorm()(y + h))


rb = ResBlock()
rb_vars = rb.init(jax.random.key(0), img)
rb_out, rb_stats = rb.apply(rb_vars, img, train=True, mutable=["batch_stats"])
assert_type(jfl.GroupNorm(num_groups=None, group_size=4), jfl.GroupNorm)
gn_linen: jfl.GroupNorm = jfl.GroupNorm()
flax_gn: nn.GroupNorm = gn_linen  # a subclass of flax's


class NnxBlock(jfx.Module):
    def __init__(self, rngs: jfx.Rngs) -> None:
        self.conv = jfx.Conv(16, 16, (3, 3), rngs=rngs)
        self.bn = jfx.BatchNorm(16, momentum=0.9, rngs=rngs)
        self.gn = jfx.GroupNorm(16, num_groups=4, rngs=rngs)
        self.inorm = jfx.InstanceNorm(16, rngs=rngs)
        self.lin = jfx.Linear(16, 16, rngs=rngs)

    def __call__(self, h: Array) -> Array:
        return self.lin(self.inorm(self.gn(jfx.relu(self.bn(self.conv(h))))) + h)


nb = NnxBlock(jfx.Rngs(0))
assert_type(nb.bn, jfx.BatchNorm)
nb_out: Array = nb(img)
nb.eval()
bn_state = jfx.state(nb, jfx.BatchStat)
