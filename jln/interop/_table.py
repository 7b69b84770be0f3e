"""The one table of torch -> jln converters and layouts, assembled from the modules that hold
them: :mod:`._converters` (torch.nn, transformers' and diffusers' LayerNorm/RMSNorm and adaptive
norms, blocks), :mod:`._batch_converters` (batch-statistics norms) and :mod:`._variants` (the
LayerNorm/RMSNorm variants of model files). Each imports only the helpers below it; a new family
adds its module here."""

from __future__ import annotations

from typing import Any

from jln.interop import (
    _adaptive_converters,
    _batch_converters,
    _converters,
    _group_converters,
    _per_head_converters,
    _variants,
)
from jln.interop._converters import Converter, Layout

#: Every converter, in recognition order (the first whose ``recognise`` accepts a module wins).
CONVERTERS: tuple[Converter, ...] = (*_converters.CONVERTERS, *_batch_converters.CONVERTERS, *_variants.CONVERTERS,
                                     *_adaptive_converters.CONVERTERS, *_group_converters.CONVERTERS,
                                     *_per_head_converters.CONVERTERS)
#: Every jln class's layout back to a torch ``state_dict``.
LAYOUTS: dict[str, Layout] = {**_converters.LAYOUTS, **_batch_converters.LAYOUTS, **_adaptive_converters.LAYOUTS,
                              **_group_converters.LAYOUTS}


def find(m: Any) -> Converter | None:
    """The converter that recognises ``m``, or None."""
    for c in CONVERTERS:
        if c.recognise(m):
            return c
    return None
