"""The torch references of the batch-statistics norms: ``torch.nn.functional.batch_norm``,
``instance_norm``, ``group_norm`` and DETR's ``FrozenBatchNorm2d``, the channels at any axis."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def batch_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, eps: float = 1e-5,
               training: bool = True, channel_axis: int = 1) -> Tensor:
    """``torch.nn.functional.batch_norm`` on batch statistics (no running statistics), the
    channels at ``channel_axis`` (moved to torch's axis 1 and back)."""
    torch = R.torch()
    assert training, "the reference takes batch statistics"
    xt = x.movedim(channel_axis, 1)
    return torch.nn.functional.batch_norm(xt, None, None, scale, bias, True, 0.1, eps).movedim(1, channel_axis)


def group_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, num_groups: int,
               eps: float = 1e-5, channel_axis: int = 1) -> Tensor:
    """``torch.nn.functional.group_norm``, the channels at ``channel_axis``."""
    torch = R.torch()
    xt = x.movedim(channel_axis, 1)
    return torch.nn.functional.group_norm(xt, num_groups, scale, bias, eps).movedim(1, channel_axis)


def instance_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, eps: float = 1e-5,
                  training: bool = True, channel_axis: int = 1) -> Tensor:
    """``torch.nn.functional.instance_norm`` on each sample's statistics (no running
    statistics), the channels at ``channel_axis``."""
    torch = R.torch()
    assert training, "the reference takes each sample's statistics"
    xt = x.movedim(channel_axis, 1)
    return torch.nn.functional.instance_norm(xt, None, None, scale, bias, True, 0.1, eps).movedim(1, channel_axis)


def frozen_batch_norm(x: Tensor, running_mean: Tensor, running_var: Tensor, scale: Tensor, bias: Tensor, *,
                      eps: float = 1e-5, channel_axis: int = 1) -> Tensor:
    """transformers' ``DetrFrozenBatchNorm2d.forward``, op by op, the channels at ``channel_axis``."""
    shape = [1] * x.dim()
    shape[channel_axis] = -1
    s = scale.reshape(shape) * (running_var.reshape(shape) + eps).rsqrt()
    return x * s + (bias.reshape(shape) - running_mean.reshape(shape) * s)
