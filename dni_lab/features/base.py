"""The feature set: a learned dictionary over one hook's activations.

A :class:`FeatureSet` maps a hook's activation ``x`` (``(..., d_in)``) to latents
``z = encode(x)`` (``(..., d_sae)``) and back, ``decode(z)``. Parameter names and
shapes follow SAELens: ``W_enc (d_in, d_sae)``, ``b_enc (d_sae)``, ``W_dec (d_sae,
d_out)``, ``b_dec (d_out)`` with ``d_out = d_in`` except for transcoders. Each
architecture (``standard.py``, ``gated.py``, ``topk.py``, ``jumprelu.py``,
``transcoder.py``) only says how latents come out of the pre-activations.

Attached to its model (``dl.inspect(..., units=[features])``) a feature set is a
unit set: its latents are units of the layer ``"{hook}:{name}"``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import nn

from ..backend.errors import DNIError

#: ``normalize_activations`` values implemented, as SAELens names them.
NORMALIZATIONS = ("none", "constant_norm_rescale", "layer_norm")

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"`` / ``"torch.float32"`` / ``torch.float32`` → ``torch.float32``."""
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).removeprefix("torch.")
    if key not in DTYPES:
        raise DNIError(f"unknown feature-set dtype {dtype!r}; use one of {sorted(DTYPES)}.")
    return DTYPES[key]



def check_width(x: torch.Tensor, d_in: int, what: str, hook: str) -> None:
    """A :class:`DNIError` unless ``x`` is ``d_in`` wide (``what`` names the unit set)."""
    if x.shape[-1] != d_in:
        raise DNIError(
            f"{what} encodes {d_in}-wide activations; got {x.shape[-1]} at its hook "
            f"{hook!r}. Attach it to a hook of width {d_in}."
        )


class FeatureSet(nn.Module):
    """A sparse dictionary over one hook's activations (SAE, transcoder, directions).

    Parameters
    ----------
    d_in : int
        Width of the hook's activation.
    d_sae : int
        Number of latents.
    hook : str
        The model address (or TransformerLens hook name) whose output is encoded.
    name : str, optional
        The set's name in score frames; defaults to the architecture.
    dtype : str or torch.dtype
        The parameters' dtype; inputs are cast to it, as SAELens does.
    apply_b_dec_to_input : bool
        Subtract ``b_dec`` from the input before encoding.
    normalize_activations : str
        ``"none"``, ``"constant_norm_rescale"`` (scale each input to norm
        ``sqrt(d_in)``, undone on decode) or ``"layer_norm"`` (standardize each
        input, undone on decode).
    d_out : int, optional
        Width of the reconstruction (transcoders); defaults to ``d_in``.
    hook_out : str, optional
        Where a transcoder's reconstruction belongs.
    meta : mapping, optional
        Anything else the file said (kept and written back on save).
    """

    architecture: ClassVar[str] = ""
    #: whether most latents are exactly zero on every input (TopK, JumpReLU)
    sparse: ClassVar[bool] = False
    #: extra parameters beyond W_enc, b_enc, W_dec, b_dec: name -> shape in (d_in, d_sae, d_out)
    extra: ClassVar[dict[str, tuple[str, ...]]] = {}
    has_b_enc: ClassVar[bool] = True

    def __init__(
        self,
        d_in: int,
        d_sae: int,
        hook: str,
        name: str | None = None,
        dtype: str | torch.dtype = "float32",
        apply_b_dec_to_input: bool = True,
        normalize_activations: str = "none",
        d_out: int | None = None,
        hook_out: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if normalize_activations in (None, ""):
            normalize_activations = "none"
        if normalize_activations not in NORMALIZATIONS:
            raise DNIError(
                f"feature set {name or self.architecture!r}: normalize_activations="
                f"{normalize_activations!r} is not implemented; dni_lab reads {NORMALIZATIONS}. "
                "Fold the normalization into the weights, or normalize the hook's output yourself."
            )
        self.d_in = int(d_in)
        self.d_sae = int(d_sae)
        self.d_out = int(d_out if d_out is not None else d_in)
        self.hook = str(hook)
        self.hook_out = hook_out
        self.name = name or self.architecture
        self.apply_b_dec_to_input = bool(apply_b_dec_to_input)
        self.normalize_activations = normalize_activations
        self.meta = dict(meta or {})
        if self.apply_b_dec_to_input and self.d_out != self.d_in:
            raise DNIError(
                f"feature set {self.name!r}: apply_b_dec_to_input needs d_out == d_in "
                f"(b_dec has {self.d_out} entries, the input {self.d_in}); set it to False."
            )
        dt = as_dtype(dtype)
        sizes = {"d_in": self.d_in, "d_sae": self.d_sae, "d_out": self.d_out}
        shapes = {"W_enc": ("d_in", "d_sae"), "W_dec": ("d_sae", "d_out"), "b_dec": ("d_out",)}
        if self.has_b_enc:
            shapes["b_enc"] = ("d_sae",)
        for pname, dims in {**shapes, **self.extra}.items():
            t = torch.zeros(tuple(sizes[d] for d in dims), dtype=dt)
            self.register_parameter(pname, nn.Parameter(t))
        self._norm: tuple[torch.Tensor, torch.Tensor] | None = None  # the last input's

    # -- what subclasses define ---------------------------------------------------
    def hidden_pre(self, x: torch.Tensor) -> torch.Tensor:
        """Pre-activations of a processed input: ``x W_enc + b_enc``."""
        return x @ self.W_enc + self.b_enc

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        """Latents from pre-activations (ReLU here; each architecture its own)."""
        return torch.relu(pre)

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.hidden_pre(x))

    # -- the public equations -----------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        return self.W_enc.dtype

    @property
    def address(self) -> str:
        """The layer name of the latents in score frames: ``"{hook}:{name}"``."""
        return f"{self.hook}:{self.name}"

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Latents ``(..., d_sae)`` of activations ``(..., d_in)``."""
        check_width(x, self.d_in, f"feature set {self.name!r}", self.hook)
        return self._encode(self.process_in(x))

    def encode_sparse(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Latents as ``(values, indices)``, each ``(..., k)``: every nonzero latent of a
        row is among its ``k`` pairs (``k`` the block's largest count; zeros fill the rest).
        """
        z = self.encode(x)
        k = max(int((z != 0).sum(-1).max()) if z.numel() else 0, 1)
        values, indices = torch.topk(z, k, dim=-1, sorted=False)
        return values, indices

    def decode(self, z: torch.Tensor, x: torch.Tensor | None = None) -> torch.Tensor:
        """Reconstruction ``z W_dec + b_dec``, with the input normalization undone.

        ``x`` (the input) is only read by skip transcoders.
        """
        out = z.to(self.dtype) @ self.W_dec + self.b_dec
        return self.process_out(out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x), x)

    def process_in(self, x: torch.Tensor) -> torch.Tensor:
        """Cast to the set's dtype, normalize, subtract ``b_dec`` if configured."""
        x = x.to(self.dtype)
        if self.normalize_activations == "constant_norm_rescale":
            scale = self.d_in**0.5 / x.norm(dim=-1, keepdim=True)
            self._norm = (scale, None)
            x = x * scale
        elif self.normalize_activations == "layer_norm":
            mu = x.mean(-1, keepdim=True)
            x = x - mu
            std = x.std(-1, keepdim=True)
            self._norm = (mu, std)
            x = x / (std + 1e-5)
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        return x

    def process_out(self, out: torch.Tensor) -> torch.Tensor:
        """Undo the normalization of the last input (SAELens keeps it the same way)."""
        if self.normalize_activations == "none":
            return out
        if self._norm is None:
            raise DNIError(
                f"feature set {self.name!r} normalizes its inputs ({self.normalize_activations}); "
                "decode needs the input it came from: call encode(x) first, or forward(x)."
            )
        a, b = self._norm
        if self.normalize_activations == "constant_norm_rescale":
            return out / a
        return out * b + a

    # -- identity -------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """The set's hyperparameters (what a cfg.json holds)."""
        cfg = {
            "architecture": self.architecture,
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "dtype": str(self.dtype).removeprefix("torch."),
            "apply_b_dec_to_input": self.apply_b_dec_to_input,
            "normalize_activations": self.normalize_activations,
            "hook": self.hook,
            "name": self.name,
        }
        if "transcoder" in self.architecture:
            cfg.update(d_out=self.d_out, hook_out=self.hook_out)
        return cfg

    def fingerprint(self) -> str:
        """A hash of the configuration and weights: same value, same latents."""
        h = hashlib.sha256(repr(sorted(self.config().items())).encode())
        for k, v in sorted(self.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, hook={self.hook!r}, d_in={self.d_in}, "
            f"d_sae={self.d_sae})"
        )
