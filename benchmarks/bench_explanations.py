"""Explanations as hypotheses at scale: 10,000 latents, each scored against its own explanation.

Usage::

    python benchmarks/bench_explanations.py            # 10,000 latents, 4,000 records
    python benchmarks/bench_explanations.py --quick    # 500 latents, 1,000 records (CI)
    python benchmarks/bench_explanations.py --out benchmarks/results/explanations.json

A synthetic stand-in, so the time is the scoring's own: records are short code-like
lines of words, digits and brackets; the "model" outputs one column per character class
and per word (the class's or the word's characters, times a size that varies), and a
StandardSAE of ``--latents`` latents reads it, latent ``j`` one column plus a little of
the others. Each latent gets an explanation drawn from the grammar
(``dni_lab/features/explanation_grammar.py``): its own column's (``--right`` of them)
in one of the grammar's phrasings, another column's, or an unparseable text
(``--unparseable``). :func:`dni_lab.features.score_explanations` scores them all with
``auroc`` and early stopping at ``--eps``.

It prints the latents, the share compiled, the inspections (chunks) run, the records
read per pair (median, max), the wall time, and the median score of right and of wrong
explanations (a sanity check: right ones near 1, wrong ones near or below 0). It asserts
nothing; with ``--out`` it stores what it printed.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.results_io import write_results  # noqa: E402

CLASSES = {  # grammar class -> the characters the stand-in model marks
    "digits": "0123456789",
    "uppercase letters": "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "whitespace": " ",
    "opening parentheses": "(",
    "closing parentheses": ")",
    "square brackets": "[]",
    "curly braces": "{}",
    "quotes": "'\"",
}
WORDS = ["def", "return", "if", "else", "elif", "for", "while", "import", "from", "class",
         "self", "None", "True", "False", "in", "not", "and", "or", "with", "as", "yield",
         "lambda", "try", "except", "pass", "print", "len", "range", "x", "y"]  # fmt: skip
WORDS += [f"v{k}" for k in range(30)]  # identifiers: 60 words, 60 token hypotheses and more
PIECES = [*WORDS, "(", ")", "[", "]", "{", "}", "'a'", '"b"', "42", "7", "X", "ZZ", ":", "="]
PHRASES = ["fires on {c}", "{c}", "the {c} characters", "activates on {c}"]
TOKEN_PHRASES = ["the token '{w}'", "tokens: {w}", "fires on the word {w}", "'{w}'"]
UNPARSEABLE = [
    "mentions of programming",
    "Explanation could not be parsed.",
    "regex: [unclosed",
    "variable names in loops",
    "the end of a function body",
]


def records(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(PIECES, int(rng.integers(6, 16)))) for _ in range(n)]


class Columns:
    """The stand-in model's encoder: per record, one column per class and per word."""

    def __init__(self) -> None:
        self.table = np.zeros((128, len(CLASSES)), dtype=np.float32)
        for k, chars in enumerate(CLASSES.values()):
            self.table[[ord(c) for c in chars], k] = 1.0
        self.words = [re.compile(rf"(?<!\w){w}(?!\w)") for w in WORDS]
        self.memo: dict[str, np.ndarray] = {}  # the stand-in's forward is not what is timed

    @property
    def width(self) -> int:
        return len(CLASSES) + len(WORDS)

    def row(self, r: str) -> np.ndarray:
        out = self.memo.get(r)
        if out is None:
            codes = np.frombuffer(r.encode("ascii"), dtype=np.uint8)
            words = np.zeros((len(r), len(WORDS)), dtype=np.float32)
            for k, rx in enumerate(self.words):
                for m in rx.finditer(r):
                    words[m.start() : m.end(), k] = 1.0
            size = 1.0 + (codes % 7)[:, None] / 7.0  # a size that varies per character
            out = self.memo[r] = np.concatenate([self.table[codes], words], 1) * size
        return out

    def __call__(self, batch: list[str]) -> torch.Tensor:
        T = max(len(r) for r in batch)
        out = np.zeros((len(batch), T, self.width), dtype=np.float32)
        for i, r in enumerate(batch):
            out[i, : len(r)] = self.row(r)
        return torch.from_numpy(out)


class StandIn(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.out = nn.Linear(width, width, bias=False)
        with torch.no_grad():
            self.out.weight.copy_(torch.eye(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x)


def explanation(col: int, rng: np.random.Generator) -> str:
    if col < len(CLASSES):
        return str(rng.choice(PHRASES)).format(c=list(CLASSES)[col])
    return str(rng.choice(TOKEN_PHRASES)).format(w=WORDS[col - len(CLASSES)])


def setup(n_latents: int, right: float, unparseable: float, seed: int = 0):
    import dni_lab as dl
    from dni_lab import features as F

    rng = np.random.default_rng(seed)
    enc = Columns()
    model = dl.Model(StandIn(enc.width), encode=enc, name="standin")
    fs = F.StandardSAE(enc.width, n_latents, "out", name="sae")
    cols = rng.integers(0, enc.width, n_latents)
    with torch.no_grad():
        for p in fs.parameters():
            p.zero_()
        fs.W_enc.copy_(torch.from_numpy(rng.normal(0, 0.02, (enc.width, n_latents))))
        fs.W_enc[torch.from_numpy(cols), torch.arange(n_latents)] = 1.0
        fs.b_enc.fill_(-0.05)
    kind = rng.random(n_latents)
    texts, truth = [], []
    for j in range(n_latents):
        if kind[j] < unparseable:
            texts.append(str(rng.choice(UNPARSEABLE)))
            truth.append("unparseable")
        elif kind[j] < unparseable + right:
            texts.append(explanation(int(cols[j]), rng))
            truth.append("right")
        else:
            other = (int(cols[j]) + int(rng.integers(1, enc.width))) % enc.width
            texts.append(explanation(other, rng))
            truth.append("wrong")
    expl = pl.DataFrame({"latent": range(n_latents), "explanation": texts, "truth": truth})
    return model, fs, expl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="500 latents, 1,000 records")
    ap.add_argument("--latents", type=int, default=10_000)
    ap.add_argument("--records", type=int, default=4_000)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--right", type=float, default=0.7, help="share of right explanations")
    ap.add_argument("--unparseable", type=float, default=0.15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.latents, args.records = 500, 1_000
    from dni_lab import features as F
    from dni_lab.features.explanation_scoring import _chunks

    torch.set_num_threads(args.threads)
    model, fs, expl = setup(args.latents, args.right, args.unparseable)
    data = records(args.records, seed=1)
    start = time.perf_counter()
    out = F.score_explanations(model, fs, expl.drop("truth"), data, eps=args.eps)
    seconds = time.perf_counter() - start
    ok = out.filter(pl.col("compiled"))
    pairs = ok.select("latent", "hid").unique()
    n_chunks = len(_chunks(pairs, 256, 32))  # score_explanations' defaults
    scored = out.with_columns(expl["truth"])
    med = scored.group_by("truth").agg(pl.col("score").median()).sort("truth")
    result = {
        "latents": args.latents,
        "records": args.records,
        "eps": args.eps,
        "threads": args.threads,
        "share_compiled": round(ok.height / out.height, 4),
        "hypotheses": int(pairs["hid"].n_unique()),
        "inspections": n_chunks,
        "records_read_median": float(ok["records_read"].median()),
        "records_read_max": int(ok["records_read"].max()),
        "converged_share": round(float(ok["converged"].mean()), 4),
        "seconds": round(seconds, 2),
        "median_score": {t: s for t, s in med.iter_rows() if t != "unparseable"},
    }
    for k, v in result.items():
        print(f"{k:>22}: {v}")
    write_results(args.out, result)


if __name__ == "__main__":
    main()
