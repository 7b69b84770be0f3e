"""The local_response_norm family (see :mod:`jln.families`)."""
