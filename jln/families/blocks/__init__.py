"""The blocks family (see :mod:`jln.families`)."""
