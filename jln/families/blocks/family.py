"""The blocks' record: ``TransformerEncoderLayer`` and ``DiTBlock`` (no public function: they
are built of the families' norms)."""

from __future__ import annotations

from jln._registry import Family
from jln.families.blocks import convert, module

FAMILY = Family(
    "blocks",
    kinds=(module.TRANSFORMER_ENCODER_LAYER, module.DIT_BLOCK),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
)
