"""Gradients of a metric with respect to a layer's activations, per symbol.

The activations of each address are read once (the engine's Extractor), then written
back into one more forward pass per address as a leaf tensor through
:func:`~.force.force_units`: the output is unchanged (the forced values are the layer's
own), and the gradient of the metric reaches the leaf exactly where the model reads the
units (a transformer's symbols' tokens; special tokens and padding keep their values and
get no gradient). This works on any forceable layer of any :class:`~dni_lab.Model`, a
Hugging Face transformer's hook points included, and never touches the parameters'
``.grad``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import DNIError, LayerError
from ..extraction.extract import Extractor, register_metric_gradients, symbol_mask
from ..extraction.models import Model
from .common import forward_output
from .force import force_units

#: ``metric(records, output, index) -> (R,)``: one value per record of a batch; ``index``
#: holds the records' positions in the data (or the batch's pair indices).
Metric = Callable[[list[Any], torch.Tensor, torch.Tensor], torch.Tensor]


def check_metric(values: Any, n: int) -> torch.Tensor:
    """The metric's batch values as a float tensor of ``(n,)``, or a clear error."""
    vals = torch.as_tensor(values)
    if vals.shape != (n,):
        raise DNIError(
            f"the metric returned shape {tuple(vals.shape)} for a batch of {n} records; "
            "return one value per record."
        )
    return vals


class GradientOf:
    """A behavior: each unit's gradient of a metric of the output, at each symbol.

    ``dl.inspect(..., behavior=dl.verify.GradientOf(metric))`` scores, instead of what
    the units hold, how much the metric (a logit difference, a loss) moves with them:
    ``∂ metric / ∂ unit`` at each symbol, on any forceable layer of any model (a Hugging
    Face transformer's hook points included). Each block then runs the model forward and
    backward once per layer read; blocks are not memoized.

    Parameters
    ----------
    metric : callable
        ``metric(records, output, index) -> (R,)``, ``index`` the records' positions in
        the data (``dl.verify.logit_difference(model, answers)`` is one).
    name : str, optional
        How provenance names it (default: the function's name).
    """

    metric_gradient = True  # how the Extractor knows it (extraction does not import verify)

    def __init__(self, metric: Metric, name: str | None = None) -> None:
        self.metric = metric
        self.name = name

    def __repr__(self) -> str:
        return f"gradient_of({self.name or getattr(self.metric, '__name__', 'metric')})"


class MetricGradients:
    """Reads ``addrs`` and the gradient of ``metric`` with respect to them, batch by batch.

    The caller holds :func:`~dni_lab.backend.extraction.extract.on_device` for the model.

    Parameters
    ----------
    model : Model
    addrs : sequence of str
        Resolved addresses (every unit of each is read and differentiated).
    metric : callable
        ``metric(records, output, index) -> (R,)``; the gradient is of its sum.
    device : torch.device
    """

    def __init__(self, model: Model, addrs: Sequence[str], metric: Metric, device) -> None:
        forceable = getattr(model, "forceable", None)
        bad = [a for a in addrs if forceable is not None and not forceable(a)]
        if bad:
            raise LayerError(
                f"cannot take gradients at {bad[0]!r} of model {model.name!r}: its units are "
                "read from part of a module's output, not written by it; use the block "
                "(hook_resid_post) or the heads' outputs (attn.hook_z)."
            )
        if not callable(metric):
            raise DNIError(
                f"the metric must be a function metric(records, output, index) -> one value "
                f"per record, not {type(metric).__name__}."
            )
        self.model, self.addrs, self.metric, self.dev = model, list(addrs), metric, device
        self.extractor = Extractor(model, {a: None for a in self.addrs}, "activation", device)

    def __call__(self, records: list[Any], first: int = 0):
        """``(values, grads, mask, metric)``: ``{addr: (R, T, W)}`` twice, ``(R, T)``, ``(R,)``."""
        model, dev = self.model, self.dev
        mask = symbol_mask(model, records, dev)
        values = {a: v.detach() for a, v in self.extractor(records, mask).items()}
        out_grads, vals = {}, None
        # One pass per address: forcing a later layer cuts the graph to an earlier one's
        # leaf (its values no longer reach the output through the forced layer).
        for a, v in values.items():
            leaf = v.clone().requires_grad_(True)
            with force_units(model, a, range(leaf.shape[-1]), leaf), torch.enable_grad():
                out = forward_output(model, records, dev)
                index = torch.arange(first, first + len(records))
                vals = check_metric(self.metric(records, out, index), len(records))
                if not vals.requires_grad:
                    raise DNIError(
                        "the metric does not depend on the model's output through autograd "
                        "(it detached it, or ran under torch.no_grad); compute it from "
                        "`output`."
                    )
                (g,) = torch.autograd.grad(vals.sum(), [leaf], allow_unused=True)
            # no gradient: the metric is read before the layer runs
            out_grads[a] = torch.zeros_like(v) if g is None else (g * mask[..., None]).detach()
        return values, out_grads, mask, vals.detach().to(torch.float64)


register_metric_gradients(MetricGradients)
