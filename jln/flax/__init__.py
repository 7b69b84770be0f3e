"""Drop-in replacements for flax's normalization layers, computed by jln.

``from jln.flax import linen as nn`` (or ``nnx``) in place of flax's: same classes, arguments,
defaults, parameter trees and RNG draws as flax's ``LayerNorm`` and ``RMSNorm``, with jln's
exact statistics, smaller saved residuals and kernels. See ``docs/flax.md``.
"""
