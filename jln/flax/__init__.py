"""Drop-in replacements for flax's namespaces, whose normalization layers jln computes.

``from jln.flax import linen as nn`` (or ``from jln.flax import nnx``) in place of flax's:
every name of ``flax.linen`` (``flax.nnx``) is there, flax's own objects, except the five
statistics norms ``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``InstanceNorm`` and
``BatchNorm``: subclasses of flax's with flax's arguments, defaults, parameter trees, running
statistics and RNG draws, computed with jln's exact statistics. See ``docs/flax.md``.
"""
