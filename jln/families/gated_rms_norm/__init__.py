"""The gated_rms_norm family (see :mod:`jln.families`)."""
