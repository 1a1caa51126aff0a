"""``dl.check(units=...)`` says what ``dl.inspect`` will do with each layer (issue 47).

``dl.check`` is the dry run of "every question up front": a layer it marks as read (a
layout) must be read by ``dl.inspect``, and a layer ``dl.inspect`` refuses must be a
question in ``dl.check`` with the same one-line fix. The layers that broke this had a
layout from a rule but no one row per record on the probe's sample: the CREPE-like
wrapper's inner modules (frames of every record on the batch axis) and a position
table (``pos``: ``(T, d)``, no record axis).
"""

from __future__ import annotations

import polars as pl
import pytest
from zoo import ZOO, load_all
from zoo.harness import hypothesis, make_model, named_modules_of

import dni_lab as dl
from dni_lab.backend.errors import LayerError

load_all()
UNDECLARED = sorted(name for name, e in ZOO.items() if e.family == "undeclared")


def checked(name: str) -> tuple[dl.Model, list, pl.DataFrame]:
    """The entry's model, records and ``dl.check``'s layer rows for every named module."""
    entry = ZOO[name]
    model, _kw = make_model(entry)
    records = entry.records()
    units = [(u, "*") for u in named_modules_of(entry)]
    frame = dl.check(model, records, [hypothesis(model, [0])], units=units)
    return model, records, frame.filter(pl.col("layer").is_not_null())


def inspect(model: dl.Model, records: list, layers: list[str]) -> pl.DataFrame:
    return dl.inspect(models=[model], hypotheses=[hypothesis(model, [0])], measures=["corr"],
                      data=records, units=[(a, "*") for a in layers], eps=None,
                      device="cpu", cache=False)  # fmt: skip


def test_the_zoo_has_the_undeclared_entries():
    assert {"framed-audio-undeclared", "residual-identity-taps"} <= set(UNDECLARED)


@pytest.mark.parametrize("name", UNDECLARED)
def test_check_and_inspect_agree_on_every_layer(name):
    model, records, rows = checked(name)
    read = rows.filter(pl.col("layout").is_not_null())["layer"].to_list()
    asked = rows.filter(pl.col("layout").is_null())
    assert read, "the entry has layers dl.check reads"
    # everything dl.check reads, dl.inspect reads, all in one run
    got = inspect(model, records, read)
    assert set(got["layer"].unique().to_list()) == set(read)
    # everything it asks, dl.inspect refuses with the evidence dl.check gave
    for row in asked.iter_rows(named=True):
        with pytest.raises(LayerError) as exc:
            inspect(model, records, [row["layer"]])
        assert row["evidence"] and row["evidence"].splitlines()[0] in str(exc.value)


def test_frames_on_the_batch_axis_are_asked_with_the_fix_inspect_names():
    _model, _records, rows = checked("framed-audio-undeclared")
    by_layer = {r["layer"]: r for r in rows.iter_rows(named=True)}
    assert by_layer["unframe"]["layout"] == "n s u"  # (N, frames, bins): read
    for layer in ("conv", "flat", "fc", "act", "bins"):
        row = by_layer[layer]
        assert row["layout"] is None and row["decided_by"] == "asked", row
        assert f"layouts={{{layer!r}: 'f u'}}" in row["evidence"]


def test_a_position_table_is_asked():
    _model, _records, rows = checked("residual-identity-taps")
    row = rows.filter(pl.col("layer") == "pos").row(0, named=True)
    assert row["layout"] is None and row["decided_by"] == "asked"
    assert "records" in row["evidence"] and "layouts=" in row["evidence"]
    assert rows.filter(pl.col("layer") == "hook_embed")["layout"].item() == "n s u"
