"""Issue 47's zoo shapes with no declaration (tests/zoo/undeclared.py): what the probes
prove, what is asked up front, and that the one-line fix a question names reads exactly
what a hand hook reads.

tests/test_zoo.py compares every module of these entries with a hand hook; here: the
readings were proved by the probes (``dl.check``'s ``decided_by``), not declared, and the
CREPE-like wrapper's inner modules, asked, read exactly once their layout is declared.
"""

from __future__ import annotations

import dataclasses

import pytest
from zoo import ZOO, load_all
from zoo.cnn import _layout
from zoo.harness import case, hypothesis, make_model
from zoo.reference import Read

import dni_lab as dl

load_all()


def layouts_of(name: str, units: list[str]) -> dict[str, tuple[str, str]]:
    """``{layer: (layout, decided_by)}`` from ``dl.check``'s dry run of ``units``."""
    entry = ZOO[name]
    model, _kw = make_model(entry)
    frame = dl.check(model, entry.records(), [hypothesis(model, [0])],
                     units=[(u, "*") for u in units])  # fmt: skip
    rows = frame.filter(frame["layer"].is_not_null())
    return {r["layer"]: (r["layout"], r["decided_by"]) for r in rows.iter_rows(named=True)}


def test_identity_taps_on_residual_sums_are_proved_by_the_probes():
    taps = ["hook_embed", "blocks.0.hook_resid_mid", "blocks.1.hook_resid_post"]
    assert layouts_of("residual-identity-taps", taps) == dict.fromkeys(taps, ("n s u", "probe"))


def test_residual_taps_read_with_no_declaration_what_a_declared_layout_reads():
    entry = ZOO["residual-identity-taps"]
    taps = ["blocks.0.hook_resid_mid", "blocks.1.hook_resid_post"]

    def frame(layouts):
        module, kw = entry.build()
        model = dl.Model(module, name=entry.name, **kw, **layouts)
        return dl.inspect(models=[model], hypotheses=[hypothesis(model, [0])], measures=["corr"],
                          data=entry.records(), units=[(t, "*") for t in taps], eps=None,
                          device="cpu", cache=False)  # fmt: skip

    got, want = frame({}), frame({"layouts": dict.fromkeys(taps, "n s u")})
    assert got.height == 24 and got["unit_score"].null_count() == 0
    assert got.select("layer", "unit", "unit_score").equals(
        want.select("layer", "unit", "unit_score")
    )


def test_a_modulelist_of_taps_is_proved_by_the_probes():
    got = layouts_of("modulelist-taps", ["taps.1", "taps.3"])
    assert got == dict.fromkeys(["taps.1", "taps.3"], ("n s u", "probe"))


def test_a_width_equal_to_every_records_length_is_told_apart_by_the_probes():
    # (N, 8, 8) both ways round: only a second probe with shorter records separates them
    got = layouts_of("width-equals-length", ["tap", "tap_t"])
    assert got == {"tap": ("n s u", "probe"), "tap_t": ("n u s", "probe")}
    assert case(ZOO["width-equals-length"], "tap_t")[0] == "equal"


def test_framed_audio_is_asked_up_front_and_the_named_fix_reads_exactly():
    entry = ZOO["framed-audio-undeclared"]
    outcome, detail = case(entry, "fc")
    assert outcome == "named-error" and "'fc'" in detail and "layouts={'fc': 'f u'}" in detail
    assert case(entry, "unframe")[0] == "equal"  # (N, frames, bins): proved, read per frame

    def declared():
        module, kw = entry.build()
        layouts = {"conv": _layout("f u r", reduce="max"), "fc": "f u", "bins": "f u"}
        return module, {**kw, "layouts": layouts}

    fixed = dataclasses.replace(entry, name="framed-audio-declared", build=declared, expect={
        "conv": Read("f u r", reduce="max"), "fc": Read("f u"), "bins": Read("f u"),
        "unframe": Read("n s u")})  # fmt: skip
    for address in ("conv", "fc", "bins", "unframe"):
        assert case(fixed, address)[0] == "equal", address


@pytest.mark.parametrize("address", ["rnn", "head"])
def test_one_character_records_are_read_like_any_other(address):
    assert "a" in ZOO["one-character-records"].records()
    assert case(ZOO["one-character-records"], address)[0] == "equal"
