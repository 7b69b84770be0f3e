"""PolyNorm's layout back to a torch ``state_dict`` (Liger's ``LigerPolyNorm`` names: ``weight``
``[3]``, ``bias`` ``[]``). No torch class in transformers or diffusers computes PolyNorm, so there
is no torch -> jln converter.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jln import _convert as C


def _sd_poly_norm(p: C.Params) -> dict[str, Any]:
    return {n: jnp.asarray(p[n]) for n in ("weight", "bias")}


LAYOUTS: dict[str, C.Layout] = {
    "PolyNorm": C.Layout("PolyNorm", _sd_poly_norm),
}

CONVERTERS: tuple[C.Converter, ...] = ()
