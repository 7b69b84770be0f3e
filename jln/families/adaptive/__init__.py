"""The adaptive family (see :mod:`jln.families`)."""
