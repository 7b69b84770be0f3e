"""The affine family (see :mod:`jln.families`)."""
