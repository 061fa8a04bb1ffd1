"""Synchronised BatchNorm written with all-reduce: ``dpedu.SyncBatchNorm``, lesson 08.

Under data parallelism each rank sees only its shard of the global batch, so a plain ``nn.BatchNorm``
normalises every shard with that shard's own mean and variance ("ghost" BatchNorm). SyncBatchNorm
normalises every shard with the statistics of the *global* batch, and it needs only two all-reduces:

- forward: each rank sums, per channel, its values and their squares, and counts them; one
  all-reduce of those three (packed in one tensor) gives every rank the global mean and variance;
- backward: the input gradient of a BatchNorm needs, per channel, the sum of the output gradients
  and the sum of output gradient times normalised input, over the whole batch: one more all-reduce,
  made only when the layer's input needs a gradient (a norm layer applied straight to the data makes
  none in backward).

The weight and bias gradients stay local, like every other parameter's: DDP averages them with the rest.
The sums are taken in float64: var = Q/n - mean^2 subtracts two large, nearly equal numbers when the
mean is large against the spread, and float32 loses every digit of it. (torch's ``nn.SyncBatchNorm``
avoids the subtraction instead: each rank computes its own mean and 1/std, an all-gather collects them
with the counts, and a parallel-variance formula combines them.)
A rank may hold any number of samples, one included, as long as the global batch has more than one
value per channel. Without a process group (or with one rank) this is exactly ``nn.BatchNorm``.
``largest_gap`` is how lesson 08 compares the ranks' results with one process's on the whole batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dpedu._validate import real, whole

__all__ = ["SyncBatchNorm", "largest_gap"]


def _all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over the ranks of the default process group, in place; alone, leave it as it is."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor)
    return tensor


def _per_channel(x: torch.Tensor) -> tuple[list[int], list[int]]:
    """The dimensions to sum over (all but channels) and the shape that broadcasts a (C,) vector on x."""
    return [0, *range(2, x.dim())], [1, x.shape[1]] + [1] * (x.dim() - 2)


class _SyncBatchNormFunction(torch.autograd.Function):
    """y = (x - mean) / sqrt(var + eps) * weight + bias, with mean and var over every rank's x.

    Computes in float32 or wider (``nn.BatchNorm`` does the same for half-precision input) and returns
    y in x's dtype, with the batch mean and unbiased variance in the computing dtype.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        dims, shape = _per_channel(x)
        channels, dtype = x.shape[1], torch.promote_types(x.dtype, torch.float32)
        # Sums in float64: var = E[x^2] - E[x]^2 loses digits in float32 when the mean is large.
        x64 = x.double()
        count = x64.new_full((1,), x.numel() // channels)  # values per channel on this rank
        totals = _all_reduce(torch.cat([x64.sum(dims), (x64 * x64).sum(dims), count]))
        n = totals[-1].item()
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got {n:.0f} over all "
                             f"ranks (this rank's input has shape {tuple(x.shape)})")
        mean = totals[:channels] / n
        var = (totals[channels:2 * channels] / n - mean * mean).clamp_min(0)  # biased, as BatchNorm normalises
        mean, invstd = mean.to(dtype), (var + eps).rsqrt().to(dtype)
        x_hat = (x.to(dtype) - mean.view(shape)) * invstd.view(shape)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.count = n
        var_unbiased = (var * n / (n - 1)).to(dtype)  # what the running variance is fed
        ctx.mark_non_differentiable(mean, var_unbiased)
        y = x_hat * weight.to(dtype).view(shape) + bias.to(dtype).view(shape)
        return y.to(x.dtype), mean, var_unbiased

    @staticmethod
    @torch.autograd.function.once_differentiable  # a second derivative would miss the all-reduces: refuse it
    def backward(ctx, grad_y, _grad_mean, _grad_var):
        x, weight, mean, invstd = ctx.saved_tensors
        dims, shape = _per_channel(x)
        channels, n, dtype = x.shape[1], ctx.count, mean.dtype
        x_hat = (x.to(dtype) - mean.view(shape)) * invstd.view(shape)
        grad_y = grad_y.to(dtype)
        sums = torch.cat([grad_y.double().sum(dims), (grad_y * x_hat).double().sum(dims)])
        # this rank's share of the parameter gradients, in the parameters' dtype
        grad_bias, grad_weight = sums[:channels].to(weight.dtype), sums[channels:].to(weight.dtype)
        grad_x = None
        if ctx.needs_input_grad[0]:
            totals = _all_reduce(sums.clone())  # the same two sums over the global batch
            sum_dy = totals[:channels].to(dtype).view(shape)
            sum_dy_xhat = totals[channels:].to(dtype).view(shape)
            # d loss / d x for x_hat = (x - mean) * invstd, with mean and var over all n values
            grad_x = (weight.to(dtype) * invstd).view(shape) * (grad_y - sum_dy / n - x_hat * sum_dy_xhat / n)
            grad_x = grad_x.to(x.dtype)
        return grad_x, grad_weight, grad_bias, None


class SyncBatchNorm(nn.Module):
    """BatchNorm over the global batch of all ranks of the default process group.

    Inputs shaped (N, C) or (N, C, ...). Training mode normalises with the global batch's mean and
    (biased) variance and updates ``running_mean`` and ``running_var`` (with the unbiased variance over
    the global count) like ``nn.BatchNorm``: ``running = (1 - momentum) * running + momentum * batch``.
    Eval mode normalises with the running statistics and communicates nothing. Parameter and buffer
    names are ``nn.BatchNorm``'s, so state dicts move between the two. Half-precision input (bfloat16,
    float16) is normalised in float32 and returned in its own dtype, the buffers staying float32, as
    ``nn.BatchNorm`` does. Every rank must call it the same number of times: each training call is a
    collective. First derivatives only: a double backward raises.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        whole("num_features", num_features)
        real("eps", eps, above=0)
        if momentum is None:
            raise ValueError("momentum=None (nn.BatchNorm's cumulative average) is not supported here: "
                             "give momentum a number from 0 to 1")
        real("momentum", momentum, at_least=0, at_most=1)
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, float(eps), float(momentum)
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"input must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 2:
            raise ValueError(f"input must be shaped (N, C) or (N, C, ...), got shape {tuple(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"input has {x.shape[1]} channels (dimension 1 of shape {tuple(x.shape)}), "
                             f"but num_features={self.num_features}")
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        y, mean, var_unbiased = _SyncBatchNormFunction.apply(x, self.weight, self.bias, self.eps)
        with torch.no_grad():
            self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
            self.running_var.lerp_(var_unbiased.to(self.running_var.dtype), self.momentum)
            self.num_batches_tracked += 1
        return y

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


def largest_gap(ranks: list[dict[str, torch.Tensor]], reference: dict[str, torch.Tensor], key: str) -> float:
    """Lesson 08's comparison: how far the ranks' ``key`` is from one process's on the whole batch, relative
    to the reference's largest value. Outputs and input gradients: each rank holds its slice of the batch."""
    if key in ("output", "input grad"):  # each rank holds its own slice of the batch
        gap = (torch.cat([r[key] for r in ranks]) - reference[key]).abs().max()
    else:  # every rank holds all of it
        gap = max((r[key] - reference[key]).abs().max() for r in ranks)
    return (gap / reference[key].abs().max()).item()
