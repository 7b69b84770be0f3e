"""The index of jln's families: one line per family, and every table derived from it.

The test suite, ``jln parity``, ``jln bench``, :mod:`jln.interop` and the linen/NNX faces read
their families here; a new family is its folder under :mod:`jln.families` plus one line in
:data:`FAMILIES`. Importing this module imports every family's functions, modules and
converters (not torch, flax's faces nor the kernels' libraries).
"""

from __future__ import annotations

from jln._convert import Converter, Layout
from jln._modules import Kind
from jln._registry import Family, Function, Op
from jln.families.adaptive import family as adaptive
from jln.families.affine import family as affine
from jln.families.batch_norm import family as batch_norm
from jln.families.blocks import family as blocks
from jln.families.dyt import family as dyt
from jln.families.gated_rms_norm import family as gated_rms_norm
from jln.families.layer_norm import family as layer_norm
from jln.families.local_response_norm import family as local_response_norm
from jln.families.lp_norm import family as lp_norm
from jln.families.poly_norm import family as poly_norm
from jln.families.rms_norm import family as rms_norm

#: Every family, in the order the registry sweeps them and the converters recognise torch
#: modules (the first converter whose ``recognise`` accepts a module wins).
FAMILIES: tuple[Family, ...] = (
    layer_norm.FAMILY,
    rms_norm.FAMILY,
    gated_rms_norm.FAMILY,
    adaptive.FAMILY,
    batch_norm.FAMILY,
    local_response_norm.FAMILY,
    lp_norm.FAMILY,
    dyt.FAMILY,
    affine.FAMILY,
    poly_norm.FAMILY,
    blocks.FAMILY,
)

#: public function name -> its registry record
FUNCTIONS: dict[str, Function] = {fn.name: fn for fam in FAMILIES for fn in fam.functions}
#: every op and convention the registry sweeps
OPS: tuple[Op, ...] = tuple(op for fam in FAMILIES for op in fam.ops)
BY_NAME: dict[str, Op] = {op.name: op for op in OPS}
#: every module kind: the classes of jln.linen and jln.nnx
KINDS: tuple[Kind, ...] = tuple(kind for fam in FAMILIES for kind in fam.kinds)
#: every torch -> jln converter, in recognition order
CONVERTERS: tuple[Converter, ...] = tuple(c for fam in FAMILIES for c in fam.converters)
#: every jln class's layout back to a torch ``state_dict``
LAYOUTS: dict[str, Layout] = {name: lay for fam in FAMILIES for name, lay in fam.layouts.items()}
#: torch classes recognised by computation but not reproduced: ``(references, why)``
NEAR_MISSES = tuple(nm for fam in FAMILIES for nm in fam.near_misses)


def find_converter(m: object) -> Converter | None:
    """The converter that recognises the torch module ``m``, or None."""
    for c in CONVERTERS:
        if c.recognise(m):
            return c
    return None
