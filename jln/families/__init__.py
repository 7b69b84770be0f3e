"""jln's norm families, one folder each: its contract (``spec.py``), public functions
(``function.py``), module kinds (``module.py``) and their linen and NNX faces, torch
reference (``reference.py``), torch converters (``convert.py``) and its record
(``family.py``), which :mod:`jln._index` lists."""
