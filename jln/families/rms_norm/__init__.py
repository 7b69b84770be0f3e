"""The rms_norm family (see :mod:`jln.families`)."""
