"""Real timm vision transformers read by ``dl.Model.from_hf(net)`` with nothing declared.

Runs in a side environment of its own (.dni_cache/timm-venv), never in the project's:
timm imports torchvision, and the torchvision built for this torch is a CUDA build that
cannot be imported on the CPU torch (an older one, installed without its dependencies,
imports; tests/test_timm.py says how). tests/test_timm.py starts this script in a
subprocess and reads the JSON line it prints last.

For every case (a tiny ``VisionTransformer`` with random weights: a class token, class
and register tokens, registers only, a distillation token, ``dynamic_img_size`` at its own
size and another, and ``vit_tiny_patch16_224`` itself) it records what dni_lab reads from
the model (prefix, symbols, default layers), each named address's ``dl.activations``
against a hand-written forward hook (patch tokens after the prefix the case's config
implies, not the one dni_lab found), ``dl.inspect``'s Pearson r on ``blocks.0`` against
one computed by hand, and whether the module was left as found (``zoo.state``'s snapshot).

Usage: ``timm_side.py [CASE ...]`` (default: every case).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

warnings.filterwarnings("ignore", message="Failed to load image Python extension")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import timm  # noqa: E402
from tolerances import f32_tol  # noqa: E402
from zoo.state import differences, snapshot  # noqa: E402

import dni_lab as dl  # noqa: E402
from dni_lab.backend.errors import DNIError  # noqa: E402

TINY = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=0)
ADDRESSES = ["patch_embed.proj", "patch_embed", "blocks.0", "blocks.1.attn",
             "blocks.1.mlp.fc1", "blocks.1", "norm"]  # fmt: skip


@dataclass
class Case:
    """One timm model and what its config says: ``prefix`` tokens before ``size // patch``
    squared patches (the class, distillation and register tokens it was built with)."""

    name: str
    build: Callable[[], nn.Module]
    prefix: int
    size: int = 32
    patch: int = 8
    records: int = 6


def _vit(**kw: Any) -> Callable[[], nn.Module]:
    from timm.models.vision_transformer import VisionTransformer

    return lambda: VisionTransformer(**{**TINY, **kw})


CASES = {
    c.name: c
    for c in [
        Case("cls", _vit(), prefix=1),
        Case("cls_reg2", _vit(class_token=True, reg_tokens=2), prefix=3),
        Case("reg4_avg", _vit(class_token=False, reg_tokens=4, global_pool="avg"), prefix=4),
        Case("distilled", lambda: timm.create_model("deit_tiny_distilled_patch16_224",
                                                    pretrained=False, **TINY), prefix=2),
        Case("dynamic", _vit(dynamic_img_size=True), prefix=1),
        # dynamic_img_size's point: images of another size than the model was built for
        Case("dynamic_48", _vit(dynamic_img_size=True), prefix=1, size=48),
        Case("vit_tiny_patch16_224", lambda: timm.create_model(
            "vit_tiny_patch16_224", pretrained=False, num_classes=0), prefix=1, size=224,
            patch=16, records=2),
    ]
}  # fmt: skip


def brightness_of(patch: int) -> Any:
    """A per-patch hypothesis: each patch's mean intensity, row-major."""

    def brightness(img):
        a = np.asarray(img).mean(0)
        g = a.shape[0] // patch
        return a.reshape(g, patch, g, patch).mean((1, 3)).ravel()

    return dl.hypothesis(brightness, name="brightness", kind="continuous")


def hooked(net: nn.Module, addresses: list[str], x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each address's output in one plain forward pass, by hand-written forward hooks."""
    seen: dict[str, torch.Tensor] = {}
    handles = [net.get_submodule(a).register_forward_hook(
        lambda _m, _i, o, a=a: seen.setdefault(a, o[0] if isinstance(o, tuple) else o))
        for a in addresses]  # fmt: skip
    try:
        with torch.no_grad():
            net(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def per_patch(address: str, out: torch.Tensor, prefix: int) -> torch.Tensor:
    """A hooked output as (records, patches, features), read from the model's conventions:
    the patch conv's map is (N, D, rows, cols); the patch embedding is flat (N, patches, D)
    or, with ``dynamic_img_size``, channels last (N, rows, cols, D); later token sequences
    carry ``prefix`` tokens before the patches."""
    if out.dim() == 4 and address.endswith("proj"):
        return out.flatten(2).transpose(1, 2)
    if address.startswith("patch_embed"):
        return out.flatten(1, 2) if out.dim() == 4 else out
    return out[:, prefix:]


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:400]}"


def run_case(case: Case) -> dict[str, Any]:
    """Everything one case reads, compared with the hand readings."""
    t0 = time.perf_counter()
    torch.manual_seed(0)
    net = case.build().eval()
    rng = np.random.default_rng(0)
    images = [rng.random((3, case.size, case.size)).astype(np.float32)
              for _ in range(case.records)]  # fmt: skip
    before = snapshot(net)
    out: dict[str, Any] = {"case": case.name, "class": type(net).__name__,
                           "prefix_expected": case.prefix,
                           "timm_prefix": int(net.num_prefix_tokens),
                           "symbols_expected": (case.size // case.patch) ** 2}  # fmt: skip
    try:
        m = dl.Model.from_hf(net, name=case.name)
    except Exception as e:  # what a user would see, recorded for the test to show
        return out | {"from_hf": _error(e), "seconds": time.perf_counter() - t0}
    out |= {"from_hf": "ok", "prefix": int(m.prefix), "symbols": int(m.symbols(images[0])),
            "positional_layers": m.positional_layers()}  # fmt: skip
    hand = hooked(net, ADDRESSES, torch.from_numpy(np.stack(images)))
    reads = []
    for a in ADDRESSES:
        want = per_patch(a, hand[a], case.prefix).double()
        row: dict[str, Any] = {"address": a, "want_shape": list(want.shape)}
        try:
            got = dl.activations(m, images, names=[a])[a].double()
        except DNIError as e:
            reads.append(row | {"outcome": "refused", "error": _error(e)})
            continue
        except Exception as e:
            reads.append(row | {"outcome": "crash", "error": _error(e)})
            continue
        row["shape"] = list(got.shape)
        if got.shape != want.shape:
            reads.append(row | {"outcome": "mismatch"})
            continue
        scale = float(want.abs().max())
        tol = f32_tol(scale, reduction=max(want.shape[-1], 3 * case.patch**2))
        diff = float((got - want).abs().max())
        reads.append(row | {"outcome": "equal" if diff <= tol else "mismatch", "diff": diff,
                            "tol": tol})  # fmt: skip
    out["reads"] = reads
    hyp = brightness_of(case.patch)
    try:
        frame = dl.inspect(m, [hyp], data=images, measures=["corr"], eps=None, cache=False)
        out["default_layers"] = sorted(set(frame["layer"]))
    except Exception as e:
        out["default_layers"] = _error(e)
    try:
        frame = dl.inspect(m, [hyp], data=images, measures=["corr"], eps=None, cache=False,
                           units=[("blocks.0", "*")])  # fmt: skip
        acts = per_patch("blocks.0", hand["blocks.0"], case.prefix)
        acts = acts.reshape(-1, acts.shape[-1]).double().numpy()
        h = np.concatenate([hyp(im) for im in images])
        want_r = np.array([np.corrcoef(acts[:, u], h)[0, 1] for u in range(acts.shape[1])])
        got_r = frame.sort("unit")["unit_score"].to_numpy()
        out["corr"] = {"units": len(got_r), "want_units": len(want_r),
                       "diff": float(np.abs(got_r - want_r).max())
                       if len(got_r) == len(want_r) else None}  # fmt: skip
    except Exception as e:
        out["corr"] = {"error": _error(e)}
    changed = differences(before, snapshot(net))
    out["left_as_found"] = not changed
    out["changed"] = changed[:10]
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def main(names: list[str]) -> None:
    torch.set_num_threads(1)  # the machine is shared; the models are tiny
    cases = [run_case(CASES[n]) for n in (names or list(CASES))]
    print(json.dumps({"torch": torch.__version__, "timm": version("timm"),
                      "torchvision": version("torchvision"), "cases": cases}))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
