"""Explanations as hypotheses: reading Neuronpedia/delphi exports, the grammar, scoring."""

from __future__ import annotations

import gzip
import json

import numpy as np
import polars as pl
import pytest
import torch
from torch import nn

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.errors import DNIError
from dni_lab.backend.measures.auroc import AUROC
from dni_lab.features.explanation_scoring import _chunks

# -- reading -------------------------------------------------------------------------


def test_reads_a_neuronpedia_export_in_its_shapes(tmp_path):
    entries = [
        {"modelId": "gpt2-small", "layer": "6-res-jb", "index": "12", "description": " digits",
         "explanationModelName": "gpt-4o-mini", "typeName": "oai_token-act-pair"},
        {"modelId": "gpt2-small", "layer": "6-res-jb", "index": 3, "description": "tokens: if",
         "score": 0.75},
    ]  # fmt: skip
    (tmp_path / "export.json").write_text(json.dumps(entries))
    df = F.read_explanations(tmp_path / "export.json")
    assert df.columns == ["latent", "explanation", "source", "layer", "explainer", "score"]
    assert df["latent"].to_list() == [12, 3]
    assert df["explanation"].to_list() == [" digits", "tokens: if"]
    assert df["source"].unique().to_list() == ["neuronpedia"]
    assert df["explainer"].to_list() == ["gpt-4o-mini", None]
    assert df["score"].to_list() == [None, 0.75]
    # the bulk files: gzipped JSON lines, the same objects
    lines = "\n".join(json.dumps(e) for e in entries).encode()
    (tmp_path / "batch-0.jsonl.gz").write_bytes(gzip.compress(lines))
    assert F.read_explanations(tmp_path / "batch-0.jsonl.gz", "neuronpedia").equals(df)
    # a feature object from /api/feature: one row per explanation
    feature = {"index": "7", "layer": "6-res-jb",
               "explanations": [{"description": "digits"}, {"description": "letters"}]}  # fmt: skip
    got = F.read_explanations(feature)
    assert got["latent"].to_list() == [7, 7]
    assert got["explanation"].to_list() == ["digits", "letters"]


def test_reads_delphi_explanation_files(tmp_path):
    run = tmp_path / "run"
    (run / "explanations").mkdir(parents=True)
    for name, text in [("layers.6_latent123", "fires on digits"), ("layers.6_latent7", "x")]:
        (run / "explanations" / f"{name}.txt").write_bytes(json.dumps(text).encode())
    direct = F.read_explanations(run / "explanations")
    assert direct.sort("latent")["latent"].to_list() == [7, 123]
    assert direct["layer"].unique().to_list() == ["layers.6"]
    assert direct["source"].unique().to_list() == ["delphi"]
    assert F.read_explanations(run).equals(direct)  # the run directory above it
    one = F.read_explanations(run / "explanations" / "layers.6_latent123.txt")
    assert one.row(0, named=True)["explanation"] == "fires on digits"
    mapping = {"layers.6_latent5": {"explanation": "digits", "score": 0.9},
               "layers.6_latent9": "letters"}  # fmt: skip
    (tmp_path / "expl.json").write_text(json.dumps(mapping))
    got = F.read_explanations(tmp_path / "expl.json")
    assert got["latent"].to_list() == [5, 9]
    assert got["score"].to_list() == [0.9, None]


@pytest.mark.parametrize(
    ("content", "fmt", "needle"),
    [
        ([{"index": 1, "description": "a"}, {"description": "b"}], "neuronpedia", "entry 1"),
        ([{"index": "x1", "description": "a"}], "neuronpedia", "'x1' is not an integer"),
        ([{"index": 1, "description": 5}], "neuronpedia", "not a string"),
        ([{"index": 1, "text": "a"}], "neuronpedia", "'description'"),
        ({"layers.6_latent1": "a", "nonsense": "b"}, "delphi", "entry 'nonsense'"),
        ({"layers.6_latent1": {"text": "a"}}, "delphi", "'explanation'"),
        ({"some": "thing"}, "auto", "cannot tell the format"),
    ],
)
def test_malformed_exports_name_the_file_and_entry(tmp_path, content, fmt, needle):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(DNIError, match="bad.json") as err:
        F.read_explanations(path, format=fmt)
    assert needle in str(err.value)


def test_a_delphi_file_that_is_not_json_is_an_error(tmp_path):
    (tmp_path / "layers.1_latent2.txt").write_text("digits, unquoted")
    with pytest.raises(DNIError, match=r"layers.1_latent2.txt.*JSON string"):
        F.read_explanations(tmp_path)


# -- the grammar ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "form", "record", "expected"),
    [
        ("fires on digits", "chars", "a1 22", "01011"),
        ("Fires on opening parentheses.", "chars", "(a)(", "1001"),
        ("uppercase letters or punctuation", "chars", "Ab,c", "1010"),
        ("any digit characters", "chars", "x9", "01"),
        ("fires on whitespace", "chars", "a b\nc", "01010"),
        ("the token 'def'", "tokens", "def undef", "111000000"),
        ("tokens: if, else, elif", "tokens", "elif if", "1111011"),
        ("fires on the word Return", "words", "return returned", "111111000000000"),
        ("the words for and while", "words", "for-while", "111011111"),
        ('"==" or "!="', "strings", "a==b!=", "011011"),
        ("the string 'ab'", "strings", "cabab", "01111"),
        ("/[0-9]+px/", "regex", "12px 3", "111100"),
        ("regex: [A-Z]{2,}", "regex", "AbCD", "0011"),
    ],
)
def test_each_grammar_form_compiles_to_a_char_hypothesis(text, form, record, expected):
    c = F.compile_explanation(text)
    assert c.ok and c.form == form and c.level == "char"
    assert "".join(str(int(v)) for v in c.values(record)) == expected
    h = c.hypothesis(name="h")
    assert (h.kind, h.level) == ("binary", "char")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty explanation"),
        ("mentions of cats", "'mentions of cats' is no regex"),
        ("Explanation could not be parsed.", "is no regex"),
        ("regex: [a-", "invalid regex '[a-'"),
        ("the token def in function definitions", "quote 'def in function definitions'"),
        ("the tokens 'if', else", "quote every item or none"),
        ("opening smileys", "character class"),
    ],
)
def test_unparseable_explanations_say_why(text, why):
    c = F.compile_explanation(text)
    assert not c.ok and c.key is None
    assert c.reason.startswith("could not parse:") and why in c.reason
    with pytest.raises(DNIError, match="was not compiled"):
        c.hypothesis()


class Spaces:
    """A stand-in tokenizer model: tokens are whitespace-separated words."""

    symbol_space = "spaces"

    def offsets(self, record):
        import re

        return [m.span() for m in re.finditer(r"\S+", record)]


def test_token_sets_are_token_level_on_a_tokenizer_model():
    c = F.compile_explanation("tokens: if, else", model=Spaces())
    assert (c.level, c.tokens) == ("token", ("if", "else"))
    assert c.values("if x else elif").tolist() == [1, 0, 1, 0]
    assert c.hypothesis().level == "token"
    # a character class stays char level: the model pools it onto its tokens
    assert F.compile_explanation("digits", model=Spaces()).level == "char"
    # listed in another order: the same hypothesis; read by another tokenizer: cached apart
    again = F.compile_explanation("tokens: else, if", model=Spaces())
    assert again.key == c.key and again.__fingerprint__() == c.__fingerprint__()
    other_tokenizer = Spaces()
    other_tokenizer.symbol_space = "other"
    other = F.compile_explanation("tokens: if, else", model=other_tokenizer)
    assert other.__fingerprint__() != c.__fingerprint__()


# -- scoring on a model whose latents are planted -------------------------------------

CLASSES = {
    "digits": str.isdigit,
    "uppercase letters": str.isupper,
    "opening parentheses": lambda ch: ch == "(",
    "whitespace": str.isspace,
}
ALPHABET = list("abcdefgh ABCD0123(),.;")


def encode(records):
    """One column per class: its indicator times a size that varies with the character."""
    T = max(len(r) for r in records)
    out = torch.zeros(len(records), T, len(CLASSES))
    for i, r in enumerate(records):
        for t, ch in enumerate(r):
            for k, is_in in enumerate(CLASSES.values()):
                if is_in(ch):
                    out[i, t, k] = 1 + (ord(ch) % 7) / 7
    return out


class Planted(nn.Module):
    def __init__(self):
        super().__init__()
        self.feat = nn.Linear(len(CLASSES), len(CLASSES), bias=False)
        with torch.no_grad():
            self.feat.weight.copy_(torch.eye(len(CLASSES)))

    def forward(self, x):
        return self.feat(x)


@pytest.fixture
def planted():
    """Latent j fires (ReLU of its class column) exactly on the characters of class j % 4."""
    model = dl.Model(Planted(), encode=encode, name="planted")
    fs = F.StandardSAE(len(CLASSES), 12, "feat", name="sae")
    with torch.no_grad():
        for p in fs.parameters():
            p.zero_()
        for j in range(12):
            fs.W_enc[j % len(CLASSES), j] = 1.0
    rng = np.random.default_rng(0)
    records = ["".join(rng.choice(ALPHABET, rng.integers(8, 40))) for _ in range(2000)]
    return model, fs, records


def test_correct_explanations_score_high_wrong_ones_near_chance(planted):
    model, fs, records = planted
    names = list(CLASSES)
    texts = [f"fires on {names[j % 4]}" for j in range(8)]  # latents 0..7: right
    texts += ["fires on lowercase letters", "the token 'a'"]  # 8, 9: wrong
    texts += ["mentions of cats", "regex: (("]  # 10, 11: not compiled
    expl = pl.DataFrame({"latent": range(12), "explanation": texts})
    out = F.score_explanations(model, fs, expl, records, eps=0.05)
    assert out.columns == ["latent", "explanation", "compiled", "reason", "hid", "score",
                           "err", "converged", "records_read"]  # fmt: skip
    assert out["latent"].to_list() == list(range(12))
    right, wrong, bad = out[:8], out[8:10], out[10:]
    assert right["score"].min() >= 0.99  # AUROC (1 + score) / 2 at least 0.995
    assert wrong["score"].abs().max() <= 0.35
    assert right["converged"].all() and (right["err"] <= 0.05).all()
    assert right["records_read"].max() < len(records)  # early stopping
    assert not bad["compiled"].any() and bad["score"].is_null().all()
    assert bad["hid"].is_null().all()
    assert all(r.startswith("could not parse:") for r in bad["reason"])
    assert right["reason"].is_null().all()
    # latents with one explanation text share one hypothesis
    assert right.filter(pl.col("latent").is_in([0, 4]))["hid"].n_unique() == 1


def test_each_pair_scores_as_its_own_inspection(planted):
    """Chunks hold other latents and hypotheses; the kept rows are each latent's own."""
    model, fs, records = planted
    texts = ["digits"] * 3 + ["whitespace", "tokens: a, b", "'ab'", "/[A-C]/", "uppercase"]
    expl = pl.DataFrame({"latent": [0, 1, 2, 0, 5, 6, 9, 4], "explanation": texts})
    # "digits" is split over two chunks, and the second also holds latent 0 (for
    # "whitespace"): pair (0, digits) is in two chunks' cross products
    chunks = _chunks(pl.DataFrame({"latent": [0, 1, 2, 0], "hid": texts[:4]}), 2, 2)
    assert sum(0 in lat and "digits" in h for lat, h in chunks) == 2
    out = F.score_explanations(model, fs, expl, records, eps=None, max_records=300,
                               chunk_latents=2, chunk_hypotheses=2)  # fmt: skip
    assert out["latent"].to_list() == expl["latent"].to_list()  # one row per explanation
    auroc = AUROC(bins=32)  # as score_explanations builds "auroc"
    for row in out.iter_rows(named=True):
        h = F.compile_explanation(row["explanation"]).hypothesis(name="h")
        alone = dl.inspect(model, [h], [auroc], records, units=[(fs, [row["latent"]])],
                           eps=None, max_records=300, block_size=256, cache=False)  # fmt: skip
        assert alone["unit_score"].item() == pytest.approx(row["score"], abs=1e-12)
        assert alone["n_records"].item() == row["records_read"] == 300


def test_chunks_respect_both_limits_and_cover_every_pair():
    rng = np.random.default_rng(1)
    pairs = pl.DataFrame({"latent": rng.integers(0, 50, 200), "hid": rng.integers(0, 30, 200)})
    pairs = pairs.with_columns(pl.col("hid").cast(pl.String)).unique()
    chunks = _chunks(pairs, max_latents=7, max_hyps=4)
    covered = set()
    for latents, hids in chunks:
        assert len(latents) <= 7 and len(hids) <= 4
        covered |= {(lat, h) for lat in latents for h in hids}
    assert set(pairs.iter_rows()) <= covered


def test_prf1_scores_the_best_threshold(planted):
    model, fs, records = planted
    expl = pl.DataFrame({"latent": [0, 1], "explanation": ["digits", "whitespace"]})
    out = F.score_explanations(model, fs, expl, records, measure="prf1", eps=0.05)
    assert out["score"].to_list() == [pytest.approx(1.0), pytest.approx(0.0, abs=0.3)]


def test_bad_arguments_are_clear_errors(planted):
    model, fs, records = planted
    expl = pl.DataFrame({"latent": [0, 40], "explanation": ["digits", "digits"]})
    with pytest.raises(DNIError, match=r"latents \[40\].*has 12"):
        F.score_explanations(model, fs, expl, records)
    ok = pl.DataFrame({"latent": [0], "explanation": ["digits"]})
    with pytest.raises(DNIError, match="iterator"):
        F.score_explanations(model, fs, ok, iter(records))
    with pytest.raises(DNIError, match="chunk_latents"):
        F.score_explanations(model, fs, ok, records, chunk_latents=0)


def test_token_explanations_on_a_tokenizer_model():
    pytest.importorskip("transformers")
    from hf_workload import corpus, tiny_gpt2

    records = corpus(300, seed=2)
    module, tok = tiny_gpt2(records)
    select = [i for i in range(len(tok)) if tok.decode([i]).strip() == "select"]
    assert select  # "select" and " select" are tokens of this BPE
    width = module.config.n_embd
    with torch.no_grad():  # token "select" (any spacing) embeds to e_0, the rest near 0
        module.transformer.wte.weight.mul_(0.01)
        module.transformer.wte.weight[select] = torch.eye(width)[0]
    model = dl.Model.from_hf(module, tok, name="gpt")
    fs = F.StandardSAE(width, 2, "transformer.wte", name="sae")
    with torch.no_grad():
        for p in fs.parameters():
            p.zero_()
        fs.W_enc[0, 0] = 1.0
        fs.b_enc.fill_(-0.5)
    expl = pl.DataFrame({"latent": [0, 1], "explanation": ["the token 'select'", "digits"]})
    out = F.score_explanations(model, fs, expl, records, eps=0.05)
    assert F.compile_explanation("the token 'select'", model).level == "token"
    assert out["score"][0] == pytest.approx(1.0)
    assert out["compiled"].all()
    assert out["score"][1] is None and "constant" in out["reason"][1]  # latent 1 never fires
