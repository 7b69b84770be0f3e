"""The dyt family (see :mod:`jln.families`)."""
