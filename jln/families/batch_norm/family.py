"""The batch-statistics family's record: ``jln.batch_norm``, ``jln.instance_norm``,
``jln.group_norm``, ``jln.frozen_batch_norm`` and their modules."""

from __future__ import annotations

from jln._registry import Family, Function, Op, but_first, but_last, spatial
from jln.families.batch_norm import convert, module, reference
from jln.families.batch_norm.function import (
    batch_norm,
    frozen_batch_norm,
    group_norm,
    instance_norm,
)
from jln.families.batch_norm.spec import BatchStatSpec, FrozenBatchNormSpec

BATCH_NORM = Function(
    "batch_norm",
    lambda a, p, o, k: (batch_norm(a["x"], None, None, *p, **o)[0],),
    lambda t, p, o, k: (reference.batch_norm(t["x"], *p, **o),),
    spec=BatchStatSpec, centered=True, stat_axes=but_last, flax="BatchNorm",
)
GROUP_NORM = Function(
    "group_norm",
    lambda a, p, o, k: (group_norm(a["x"], o.pop("num_groups"), *p, **o),),
    lambda t, p, o, k: (reference.group_norm(t["x"], *p, **o),),
    spec=BatchStatSpec, centered=True, stat_axes=but_first, flax="GroupNorm",
)
INSTANCE_NORM = Function(
    "instance_norm",
    lambda a, p, o, k: (instance_norm(a["x"], None, None, *p, **o)[0],),
    lambda t, p, o, k: (reference.instance_norm(t["x"], *p, **o),),
    spec=BatchStatSpec, centered=True, stat_axes=spatial, min_rank=3, flax="InstanceNorm",
)
FROZEN_BATCH_NORM = Function(
    "frozen_batch_norm",
    lambda a, p, o, k: (frozen_batch_norm(a["x"], a["running_mean"], a["running_var"], *p, **o),),
    lambda t, p, o, k: (reference.frozen_batch_norm(t["x"], t["running_mean"], t["running_var"], *p, **o),),
    spec=FrozenBatchNormSpec, stat_axes=lambda ndim, k: (), impl=False, min_rank=2,
)

FAMILY = Family(
    "batch_norm",
    functions=(BATCH_NORM, GROUP_NORM, INSTANCE_NORM, FROZEN_BATCH_NORM),
    ops=(
        # batch statistics, the channels last: x [rows, D] is a batch of rows with D channels
        Op("batch_norm", BATCH_NORM, options={"training": True, "channel_axis": -1}, multi_axis=False),
        Op("group_norm[1]", GROUP_NORM, options={"num_groups": 1, "channel_axis": -1}, multi_axis=False),
        # the channels last; a batch, at least one spatial axis, then the channels
        # (the general rule, as batch_norm: torch's float32 sums over a few elements tie differently)
        Op("instance_norm", INSTANCE_NORM, options={"training": True, "channel_axis": -1}, multi_axis=False),
        # (not bit-exact in half precision: torch's CPU rsqrt of a half tensor rounds sqrt first in the
        # elements past its last full vector, so torch's own result depends on the channel's position)
        Op("frozen_batch_norm", FROZEN_BATCH_NORM, extra=("running_mean", "running_var"),
           options={"channel_axis": -1}, multi_axis=False),
    ),
    kinds=(module.BATCH_NORM, module.INSTANCE_NORM, module.GROUP_NORM, module.FROZEN_BATCH_NORM),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
    near_misses=convert.NEAR_MISSES,
)
