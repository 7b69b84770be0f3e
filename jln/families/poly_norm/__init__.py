"""The poly_norm family (see :mod:`jln.families`)."""
