"""``dni-lab probe fit|apply|report``: the shipped SQL model (quick variant, cached by
earlier runs) or a ``module:function`` model; a user's error is one line on stderr with
exit code 2, never a traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import CharLM, encode_chars, paren, random_records

import dni_lab as dl
from dni_lab.cli import main

HYP = "sql.range:KwSelect"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("probe") / "kw.safetensors"
    rc = main(["probe", "fit", "--layer", "lstm", "--hypothesis", HYP, "--out", str(out),
               "--quick", "--queries", "20", "--folds", "3"])  # fmt: skip
    assert rc == 0
    return out


def one_line_error(capsys, rc: int, *words: str) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2, captured
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("dni-lab probe ")
    for w in words:
        assert w in err, err
    return err


def test_fit_writes_a_bound_probe_and_how_it_was_built(fitted):
    side = json.loads(fitted.with_suffix(".json").read_text())
    assert side["model"]["name"] == "sql-lstm" and side["layer"] == "lstm"
    assert side["width"] == 128
    cli = side["training"]["cli"]
    assert cli["hypothesis"] == HYP and cli["quick"] is True and cli["model"] is None
    assert side["cv_auroc"] > 0.9  # SELECT's keyword is in plain sight of the LSTM


def test_apply_prints_each_characters_probability(fitted, capsys):
    assert main(["probe", "apply", str(fitted), "--text", "SELECT a FROM t"]) == 0
    out = capsys.readouterr().out
    assert "char" in out and "probability" in out and "threshold" in out
    rows = [line for line in out.splitlines() if line.startswith("│ 0")]
    assert len(rows) == len("SELECT a FROM t")
    predicted = [r.split("┆")[-1].strip(" │") for r in rows]
    assert predicted[:6] == ["true"] * 6  # inside the keyword
    assert predicted[-1] == "false"  # the table name is not
    # the sidecar's stem works as well, and one row per record with --per record
    stem = str(fitted.with_suffix(""))
    assert main(["probe", "apply", stem, "--text", "SELECT", "--text", "FROM x",
                 "--per", "record"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "symbols" in out and "char" not in out


def test_report_prints_the_statistics_on_held_out_records(fitted, capsys):
    rc = main(["probe", "report", str(fitted), "--queries", "10", "--n-boot", "50"])
    assert rc == 0
    out = capsys.readouterr().out
    assert f"hypothesis {HYP}" in out and "50 bootstrap replicates" in out
    for name in ("auroc", "recall_at_fpr_0.01", "ece_equal_mass_10", "f1_at_threshold"):
        assert name in out


def test_errors_are_one_line_with_exit_code_2(fitted, tmp_path, capsys):
    rc = main(["probe", "fit", "--layer", "lstm", "--hypothesis", "sql.range:KwSelec",
               "--quick", "--out", str(tmp_path / "x")])  # fmt: skip
    one_line_error(capsys, rc, "unknown hypothesis", "did you mean sql.range:KwSelect")
    rc = main(["probe", "apply", str(tmp_path / "missing.safetensors"), "--text", "SELECT"])
    one_line_error(capsys, rc, "missing.json")
    altered = tmp_path / "altered.safetensors"
    altered.write_bytes(fitted.read_bytes() + b"\0")
    altered.with_suffix(".json").write_text(fitted.with_suffix(".json").read_text())
    rc = main(["probe", "apply", str(altered), "--text", "SELECT"])
    one_line_error(capsys, rc, "altered.safetensors was altered")
    rc = main(["probe", "report", str(fitted), "--hypothesis", "nope", "--n-boot", "5"])
    one_line_error(capsys, rc, "unknown hypothesis 'nope'")
    rc = main(["probe", "fit", "--layer", "lsm", "--hypothesis", HYP, "--quick",
               "--queries", "3", "--out", str(tmp_path / "y")])  # fmt: skip
    one_line_error(capsys, rc, "no layer 'lsm'")
    rc = main(["probe", "apply", str(fitted), "--text", "x", "--model", "no_such_module:fn"])
    one_line_error(capsys, rc, "--model no_such_module:fn", "cannot import")
    with pytest.raises(SystemExit) as exit_:  # argparse's own usage error: code 2 too
        main(["probe"])
    assert exit_.value.code == 2


TOY = """
import torch
from conftest import CharLM, encode_chars, paren, random_records
import dni_lab as dl

def model():
    torch.manual_seed(0)
    return dl.Model(CharLM(), encode=encode_chars, name="toy"), random_records({n}, seed={seed})
"""


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    """``toy_cli_models:model`` importable from the working directory, as a user's is."""
    (tmp_path / "toy_cli_models.py").write_text(
        TOY.format(n=80, seed=0) + "\nheld_out = lambda: (model()[0], random_records(40, 9))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI adds the working directory
    yield tmp_path
    sys.modules.pop("toy_cli_models", None)


def test_a_model_given_as_module_function(toy_module, capsys):
    out = toy_module / "toy.safetensors"
    rc = main(["probe", "fit", "--model", "toy_cli_models:model", "--layer", "lstm",
               "--hypothesis", "conftest:paren", "--out", str(out), "--folds", "3"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert "of toy" in capsys.readouterr().out
    # apply rebuilds the model fit recorded; report scores the function's records
    assert main(["probe", "apply", str(out), "--text", "ab(cd)"]) == 0
    assert "┆ (" in capsys.readouterr().out
    rc = main(["probe", "report", str(out), "--model", "toy_cli_models:held_out",
               "--n-boot", "20"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert "held out: 40 records" in capsys.readouterr().out


def test_a_probe_saved_in_python_needs_its_model_and_hypothesis(toy_module, capsys):
    torch.manual_seed(0)
    lm = dl.Model(CharLM(), encode=encode_chars, name="toy")
    path = dl.Probe("lstm", folds=None).fit(lm, random_records(80), paren).save(toy_module / "p")
    rc = main(["probe", "apply", str(path), "--text", "ab"])
    one_line_error(capsys, rc, "model 'toy', not the shipped SQL model", "--model")
    rc = main(["probe", "report", str(path), "--model", "toy_cli_models:model"])
    one_line_error(capsys, rc, "pass --hypothesis")
    rc = main(["probe", "report", str(path), "--model", "toy_cli_models:model",
               "--hypothesis", "conftest:paren", "--n-boot", "10"])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    # another model's weights: refused, with the flag (not the keyword) as the fix
    (toy_module / "other_cli_models.py").write_text(TOY.replace("manual_seed(0)", "manual_seed(1)")
                                                    .format(n=10, seed=0))  # fmt: skip
    rc = main(["probe", "apply", str(path), "--text", "ab", "--model", "other_cli_models:model"])
    one_line_error(capsys, rc, "--allow-other-model")
    sys.modules.pop("other_cli_models", None)
    rc = main(["probe", "apply", str(path), "--text", "ab", "--model", "other_cli_models:model",
               "--allow-other-model"])  # fmt: skip
    assert rc == 0
