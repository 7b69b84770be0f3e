"""The layer_norm family (see :mod:`jln.families`)."""
