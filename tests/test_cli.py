"""The main job: ``dni-lab demo`` trains or loads the SQL model, inspects it, writes Parquet."""

from __future__ import annotations

import polars as pl
import pytest

import dni_lab as dl
from dni_lab.cli import main


def test_demo_quick_writes_scores(tmp_path, capsys):
    out = tmp_path / "scores.parquet"
    rc = main(["demo", "--quick", "--queries", "40", "--measures", "corr", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Top 3 units per hypothesis" in printed and "sql.range:" in printed
    frame = pl.read_parquet(out)
    assert frame.height > 0 and set(frame["measure"]) == {"corr"}
    assert frame["hid"].str.starts_with("sql.").all()
    assert frame["unit_score"].drop_nulls().abs().max() > 0.3  # a trained model has structure
    assert dl.read_params(out)["measures"] == ["corr"]


def test_demo_probe_rows_option(capsys):
    """--probe-rows takes a count or 'all'; anything else is a one-line usage error."""
    from dni_lab.cli import _measures

    ms = _measures(["corr", "logreg"], 20_000)
    assert ms[0] == "corr" and ms[1].max_rows == 20_000
    assert "uniform sample of 20,000 symbols" in capsys.readouterr().out
    assert _measures(["corr", "logreg"], None)[1].max_rows is None
    for bad in ("many", "0"):
        with pytest.raises(SystemExit):
            main(["demo", "--quick", "--probe-rows", bad])
        assert "--probe-rows" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("queries", "measures"), [("60", []), ("20", ["--measures", "corr", "logreg"])],
    ids=["lda", "logreg"],
)  # fmt: skip
def test_the_demo_frame_converges_with_its_probe(tmp_path, capsys, queries, measures):
    """The main job's frame (quick mode): corr and a probe, the default closed-form lda
    or the uncapped L1 logistic probe, every pair converged (null ones with their reason),
    the probe's pairs included. At this size the probe reads to the end (its pairs are
    full-data values); with two blocks or more, corr's pairs settle before it, which is
    what could go wrong (the logistic probe's case is one block: seconds, not minutes)."""
    out = tmp_path / "scores.parquet"
    assert main(["demo", "--quick", "--queries", queries, "--out", str(out), *measures]) == 0
    printed = capsys.readouterr().out
    assert "uniform sample" not in printed  # no cap by default
    frame = pl.read_parquet(out)
    probe = "logreg" if measures else "lda"
    assert set(frame["measure"]) == {"corr", probe}
    share = frame.group_by("measure").agg(pl.col("converged").mean()).sort("measure")
    assert (share["converged"] >= 0.95).all(), share
    assert f"{probe} " in printed.split("inspection:")[1].split("\n")[0]  # the converged line
    windows = int(frame["n_records"].max())
    early = frame.filter(pl.col("converged") & (pl.col("n_records") < windows))
    if windows > 512:  # more than one block of the demo's default size
        assert early.height > 0, "nothing settled before the data ended"
    assert dl.read_params(out)["probe_rows"] is None
