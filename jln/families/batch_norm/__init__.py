"""The batch_norm family (see :mod:`jln.families`)."""
