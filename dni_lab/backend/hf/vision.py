"""Vision transformers as :class:`~dni_lab.backend.extraction.models.Model`: patches as symbols.

``dl.Model.from_hf(vit)`` (no tokenizer) wraps a Hugging Face vision transformer
(``ViTModel``, ``DeiTModel``, ``Dinov2Model``, ``Dinov2WithRegistersModel``, ...) or a
timm ``VisionTransformer`` with nothing declared: everything it needs is in the model.

* **Symbols** are the patches of an image record, row-major: a ``H x W`` image read in
  ``p x p`` patches has ``(H // p) * (W // p)`` of them.
* **Prefix**: the positions before the patches (``[CLS]``, DeiT's distillation token,
  register tokens) are counted from the model (the embeddings' token parameters and
  ``num_register_tokens``, or timm's ``num_prefix_tokens``) and are no symbol. The patch
  embedding itself has no prefix: it runs before they are added.
* **Layouts**: every 3-D output of a vision transformer is ``(records, tokens,
  features)`` and its patch projection a ``(records, features, rows, columns)`` map of
  patches; both are read so without a probe (:meth:`VisionModel.own_layout`).
* **Hypotheses** (:mod:`.patch_align`) give one value per patch, or one per pixel
  (``H * W`` values or an ``H x W`` array), pooled onto each patch's pixels per kind
  (``any`` for binary, ``mean`` for continuous, ``first`` for categorical by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import DNIError, RecordError
from ..extraction.models import Model
from .align import DEFAULT_POOL, POOLS

#: The default units' layers of a vision transformer are its blocks; these are what the
#: defaults leave out, named in a frame's provenance.
_BEFORE = ("patch embedding", "embeddings")


def is_vision(module: nn.Module) -> bool:
    """Whether ``module`` is a vision transformer :class:`VisionModel` can read."""
    return _timm_vit(module) or _hf_patch(module) is not None


def _timm_vit(module: nn.Module) -> bool:
    return hasattr(module, "patch_embed") and hasattr(module, "num_prefix_tokens")


def _timm_nhwc(patch_embed: nn.Module) -> bool:
    """Whether a timm patch embedding keeps its grid, channels last (``output_fmt='NHWC'``)."""
    fmt = getattr(patch_embed, "output_fmt", None)
    return not getattr(patch_embed, "flatten", True) and getattr(fmt, "value", fmt) == "NHWC"


def _hf_patch(module: nn.Module) -> tuple[int, int] | None:
    """The patch size a Hugging Face vision config names, or None."""
    config = getattr(module, "config", None)
    p = getattr(config, "patch_size", None)
    if p is None or getattr(config, "image_size", None) is None:
        return None
    return (int(p), int(p)) if isinstance(p, int) else (int(p[0]), int(p[1]))


def _pair(x: Any) -> tuple[int, int]:
    return (int(x), int(x)) if isinstance(x, int) else (int(x[0]), int(x[1]))


class VisionModel(Model):
    """A vision transformer whose symbols are an image's patches.

    Parameters
    ----------
    module : nn.Module
        A Hugging Face vision transformer (a config with ``patch_size`` and
        ``image_size``; ``pixel_values`` in) or a timm ``VisionTransformer``.
    name : str, optional
        The model id in score frames.
    pool : dict, optional
        How a per-pixel hypothesis becomes one value per patch, per kind:
        ``{"binary": "any", "continuous": "mean", "categorical": "first"}`` by default;
        each value one of ``"first"``, ``"last"``, ``"mean"``, ``"any"``.
    meta : mapping, optional
        Catalog metadata.
    layouts : mapping, optional
        ``{address: layout}`` for an output the model's rule does not cover.

    Notes
    -----
    A record is an image: ``(C, H, W)``, ``(H, W, C)`` (channels last, when ``C`` is the
    model's channel count and the first axis is not) or ``(H, W)`` for a one-channel
    model, as a NumPy array or a tensor.
    """

    def __init__(
        self,
        module: nn.Module,
        name: str | None = None,
        pool: Mapping[str, str] | None = None,
        meta: Mapping[str, Any] | None = None,
        layouts: Mapping[str, Any] | None = None,
    ) -> None:
        if not is_vision(module):
            raise DNIError(
                f"Model.from_hf got no tokenizer, and {type(module).__name__} is no vision "
                "transformer (no config with patch_size and image_size, no timm patch_embed): "
                "pass its tokenizer, Model.from_hf(module, tokenizer), for a text model."
            )
        self.timm = _timm_vit(module)
        conv = _patch_conv(module)
        #: timm's ``dynamic_img_size`` patch embedding returns ``(records, rows, columns,
        #: features)`` (channels last), not a flat sequence of patches
        self.nhwc = self.timm and _timm_nhwc(module.patch_embed)
        if self.timm:
            self.patch = _pair(module.patch_embed.patch_size)
            self.channels = int(conv.in_channels) if conv is not None else 3
            n_prefix = int(module.num_prefix_tokens)
        else:
            config = module.config
            self.patch = _hf_patch(module)
            self.channels = int(getattr(config, "num_channels", 3))
            n_prefix = _hf_prefix(module)
        self.pool = {**DEFAULT_POOL, **dict(pool or {})}
        bad = {k: v for k, v in self.pool.items() if v not in POOLS}
        if bad:
            raise DNIError(f"unknown pooling {bad}; use one of {POOLS} per hypothesis kind.")
        #: the module that turns pixels into patches: it and what it holds have no prefix
        self.patch_module = _patch_path(module, conv)
        super().__init__(module, encode=self._encode, name=name, symbols=self._n_symbols,
                         resize=False, meta=meta, layouts=layouts, prefix=n_prefix)  # fmt: skip
        arch = getattr(getattr(module, "config", None), "model_type", None)
        self.meta.setdefault("architecture", arch or type(module).__name__)
        self._blocks = _blocks(module)

    # -- records and symbols ------------------------------------------------------
    def image(self, record: Any) -> np.ndarray:
        """``record`` as a float32 ``(C, H, W)`` array; a :class:`RecordError` if it is none."""
        arr = record.detach().cpu().numpy() if isinstance(record, torch.Tensor) else record
        try:
            arr = np.asarray(arr, dtype=np.float32)
        except (TypeError, ValueError):
            arr = None
        c = self.channels
        if arr is not None and arr.ndim == 2 and c == 1:
            return arr[None]
        if arr is not None and arr.ndim == 3 and arr.shape[0] != c and arr.shape[-1] == c:
            return np.moveaxis(arr, -1, 0)
        if arr is None or arr.ndim != 3 or arr.shape[0] != c:
            shape = getattr(arr, "shape", None)
            raise RecordError(
                f"model {self.name!r} reads images of {c} channels, (C, H, W) or (H, W, C); "
                f"got {type(record).__name__} of shape {shape}. Pass one image per record."
            )
        return arr

    def grid(self, record: Any) -> tuple[int, int]:
        """Patch rows and columns of an image record."""
        _c, h, w = self.image(record).shape
        return h // self.patch[0], w // self.patch[1]

    def _n_symbols(self, record: Any) -> int:
        rows, cols = self.grid(record)
        return rows * cols

    def _encode(self, records: list[Any]) -> Any:
        images = [self.image(r) for r in records]
        shapes = {im.shape for im in images}
        if len(shapes) > 1:
            raise RecordError(
                f"model {self.name!r} got images of {len(shapes)} sizes in one block "
                f"({sorted(shapes)[:3]}); resize them to one size before reading."
            )
        dtype = next((p.dtype for p in self.module.parameters()), torch.float32)
        x = torch.from_numpy(np.stack(images)).to(dtype)
        return x if self.timm else {"pixel_values": x}

    @property
    def symbol_space(self) -> str:
        """Models with equal patch sizes and pooling see the same symbols."""
        return f"patches:{self.patch[0]}x{self.patch[1]}:{sorted(self.pool.items())}"

    def align(self, families: list) -> list:
        """The hypothesis families as they read this model's patches (:mod:`.patch_align`)."""
        from .patch_align import PatchFamily

        return [PatchFamily(f, self) for f in families]

    # -- layers -------------------------------------------------------------------
    def positional_layers(self) -> list[str]:
        """The blocks: position ``i`` is block ``i``, and the default units."""
        if self._blocks is None:
            return super().positional_layers()
        name, n = self._blocks
        return [f"{name}.{i}" for i in range(n)]

    def left_out(self) -> dict[str, str]:
        """Per-patch layers that are not among the default units (the blocks), and what each is."""
        out = {}
        if self.patch_module:
            out[self.patch_module] = _BEFORE[0]
        emb = self.patch_module.rpartition(".")[0] if self.patch_module else ""
        if emb and not self.timm:
            out[emb] = f"{_BEFORE[1]} (patches, position embeddings and the prefix)"
        return out

    def prefix_of(self, address: str) -> int:
        """Leading non-symbol positions of ``address``: none inside the patch embedding."""
        p = self.patch_module
        if p and (address == p or address.startswith(p + ".")):
            return 0
        return self.prefix

    def own_layout(self, address: str, module: nn.Module, ndim: int) -> str | None:
        """A vision transformer's rule: 3-D outputs are ``(records, tokens, features)``,
        the patch projection's map ``(records, features, rows, columns)`` of patches."""
        if ndim == 3:
            return "n s u"
        if (
            ndim == 4
            and self.nhwc
            and self.prefix_of(address) == 0
            and not isinstance(module, nn.Conv2d)
        ):
            return "n s s u"
        if ndim == 4 and isinstance(module, nn.Conv2d) and self.prefix_of(address) == 0:
            return "n u s s"
        return super().own_layout(address, module, ndim)

    def _image_hw(self, layout: Any, t: torch.Tensor, records: list[Any], address: str):
        return None  # a map of patches is read at its own grid: its pixels are the patches


def _patch_conv(module: nn.Module) -> nn.Conv2d | None:
    """The convolution that cuts images into patches (kernel = stride), if any."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d) and tuple(m.kernel_size) == tuple(m.stride):
            return m
    return None


def _patch_path(module: nn.Module, conv: nn.Module | None) -> str:
    """The address of the module that holds the patch convolution (its parent), or ''."""
    if conv is None:
        return ""
    path = next(n for n, m in module.named_modules() if m is conv)
    parent = path.rpartition(".")[0]
    return parent or path


def _hf_prefix(module: nn.Module) -> int:
    """Tokens before the patches: ``[CLS]``, a distillation token, register tokens."""
    n = int(getattr(module.config, "num_register_tokens", 0) or 0)
    for name, p in module.named_parameters():
        leaf = name.rpartition(".")[2]
        if leaf in ("cls_token", "distillation_token") and p.dim() == 3:
            n += int(p.shape[1])
    return n


def _blocks(module: nn.Module) -> tuple[str, int] | None:
    """The outermost list of transformer blocks, and how many."""
    blocks = getattr(module, "blocks", None)
    # timm keeps its blocks in an nn.Sequential, which the ModuleList search below misses
    if isinstance(blocks, nn.Sequential) and len(blocks):
        return "blocks", len(blocks)
    lists = [(n, len(m)) for n, m in module.named_modules()
             if isinstance(m, nn.ModuleList) and len(m)]  # fmt: skip
    return min(lists, key=lambda x: x[0].count(".")) if lists else None

