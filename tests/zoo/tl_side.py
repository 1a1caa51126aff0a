"""The zoo's harness over TransformerLens models, run in the side environment
(``make zoo-env``: .dni_cache/zoo-venv has dni_lab editable and transformer-lens; neither
is the other's dependency). ``tests/test_zoo.py`` runs it in a subprocess:

    .dni_cache/zoo-venv/bin/python tests/zoo/tl_side.py OUT.json

A tiny ``HookedTransformer`` from a config (random init, fixed seed, no hub) and, where
the installed TransformerLens has it, a ``TransformerBridge`` around a tiny random GPT-2
(saved to a temporary directory, booted offline). Every hook
point is read by TransformerLens itself (``run_with_cache``) — the reference — and by
dni_lab (``dl.inspect`` corr vs float64 Pearson within 1e-6; the behaviors service within
float32 rounding), or refused with a named DNIError before any record is scored. Writes
one record per (model, hook): outcome and detail.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the models are built here, never fetched
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # hypotheses/ (a tokenizer)

import dni_lab as dl
from zoo import values
from zoo.harness import behaviors, counted, hypothesis, pearson, scores
from zoo.reference import Read, ReadingError, read

#: per hook name ending, the contract's reading of TransformerLens' tensor
HEADS = ("_q", "_k", "_v", "_z", "_result", "_rot_q", "_rot_k", "q_normed", "k_normed",
         "q.hook_out", "k.hook_out", "v.hook_out", "o.hook_in")  # the last four: the bridge's


def reading(name: str, t: torch.Tensor) -> Read | None:
    """(batch, pos, d) → ``n s u``; (batch, pos, head, d) → ``n s u u``; attention
    (batch, head, q, k) has no reading (the key axis is not units)."""
    if t.dim() == 3:
        return Read("n s u")
    if t.dim() == 4 and name.endswith(HEADS):
        return Read("n s u u")
    return None


def tokens(n: int = 10, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 12, int(rng.integers(3, 10))).tolist() for _ in range(n)]


def encode(records: list[list[int]]) -> torch.Tensor:
    """Token ids, 0 pads at the end (causal attention: padding never reaches a real one)."""
    out = torch.zeros(len(records), max(len(r) for r in records), dtype=torch.long)
    for i, r in enumerate(records):
        out[i, : len(r)] = torch.tensor(r)
    return out


def hooked_transformer():
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    torch.manual_seed(60)
    cfg = HookedTransformerConfig(n_layers=2, d_model=16, n_ctx=16, d_head=4, n_heads=4,
                                  d_mlp=20, d_vocab=12, act_fn="gelu", normalization_type="LN",
                                  positional_embedding_type="rotary", seed=60,
                                  device="cpu")  # fmt: skip
    ht = HookedTransformer(cfg).eval()
    ht.set_use_attn_result(True)
    return ht


def transformer_bridge(tmp: str):
    """TransformerLens' bridge around a tiny random GPT-2 saved to ``tmp`` (offline)."""
    import transformers
    from transformer_lens.model_bridge import TransformerBridge

    from hypotheses.workloads.hf_tokenizers import bpe

    tok = bpe(["abc def ghi jkl"] * 20, vocab_size=300)
    torch.manual_seed(61)
    cfg = transformers.GPT2Config(vocab_size=len(tok), n_positions=32, n_ctx=32, n_embd=16,
                                  n_layer=2, n_head=4, bos_token_id=tok.eos_token_id,
                                  eos_token_id=tok.eos_token_id)  # fmt: skip
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    hf.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    return TransformerBridge.boot_transformers(tmp, hf_model=hf, device="cpu").eval()


def cases(name: str, module, records: list) -> list[dict]:
    model = dl.Model(module, encode=encode, name=name)
    with torch.no_grad():
        _, cache = module.run_with_cache(encode(records))
    hyp = [np.asarray(values(r, len(r))) for r in records]
    counts = [len(r) for r in records]
    out = []
    for hook in module.hook_dict:
        rec = {"model": name, "module": hook, "family": "transformer-lens"}
        try:
            rec.update(one(model, records, hook, cache.cache_dict.get(hook), counts, hyp))
        except AssertionError as exc:
            rec.update(outcome="failed", detail=str(exc)[:400])
        except Exception as exc:  # a crash after the data was read is a failure too
            rec.update(outcome="failed", detail=f"{type(exc).__name__}: {exc}"[:400])
        out.append(rec)
    return out


def one(model, records, hook, t, counts, hyp) -> dict:
    want = None
    if t is not None and (spec := reading(hook, t)) is not None:
        try:
            want = read(t, spec, counts)
        except ReadingError:
            want = None
    if want is None:  # not run, or no reading: a named refusal before any data is read
        calls, pulled = [0], [0]
        try:
            dl.inspect(model, [hypothesis(model, calls)], ["corr"], counted(records, pulled),
                       units=[(hook, "*")], eps=None, device="cpu", cache=False)  # fmt: skip
        except dl.DNIError as exc:
            assert calls[0] == 0, f"{type(exc).__name__} after {calls[0]} hypothesis calls: {exc}"
            return {"outcome": "named-error", "kind": type(exc).__name__, "detail": str(exc)[:200]}
        raise AssertionError("read a hook that has no reading")
    try:
        got = scores(model, records, hook)
    except dl.DNIError as exc:
        raise AssertionError(f"refused: {type(exc).__name__}: {exc}") from None
    ref = pearson(want, hyp)
    null = np.isnan(ref)
    assert got.shape == ref.shape, f"{got.shape[0]} units scored, TL has {ref.shape[0]}"
    assert (np.isnan(got) == null).all(), "null scores differ"
    diff = float(np.abs(got[~null] - ref[~null]).max(initial=0))
    assert diff <= 1e-6, f"corr differs by {diff:.3g}"
    for i, (a, w) in enumerate(zip(behaviors(model, records, hook), want, strict=True)):
        err = float(np.abs(a - w).max(initial=0))
        assert err <= 1e-5 * max(1.0, float(np.abs(w).max(initial=0))), f"record {i}: {err:.3g}"
    return {"outcome": "equal", "kind": "", "detail": f"{ref.shape[0]} units"}


def main(path: str) -> None:
    records = tokens()
    results = cases("hooked-transformer", hooked_transformer(), records)
    meta = {"transformer_lens": version("transformer-lens"), "bridge": "built"}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            bridge = transformer_bridge(tmp)
    except ImportError as exc:  # a TransformerLens without the bridge: say so
        meta["bridge"] = f"not built: {exc}"
    else:
        results += cases("transformer-bridge", bridge, records)
    Path(path).write_text(json.dumps({"meta": meta, "results": results}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
