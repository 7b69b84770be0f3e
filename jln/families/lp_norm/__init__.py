"""The lp_norm family (see :mod:`jln.families`)."""
