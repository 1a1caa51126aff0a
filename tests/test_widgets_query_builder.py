"""Query builder: the form state, the %%inspect text, running and stopping."""

from __future__ import annotations

import numpy as np
import pytest

import dni_lab as dl
from dni_lab.backend.query.subset import SubsetFamily
from dni_lab.widgets import QueryBuilder
from dni_lab.widgets.query_builder import units_spec


def test_units_spec():
    assert units_spec("*") == "*" and units_spec("") == "*"
    assert units_spec("0-2, 7") == [0, 1, 2, 7]
    with pytest.raises(ValueError, match="cannot read units"):
        units_spec("a-b")


def test_form_to_sql_and_arguments(char_model, records, hyps):
    qb = QueryBuilder(char_model, hyps, {"train": records})
    assert (
        qb._catalog["models"][0]["mid"] == "toy" and "lstm.l1" in qb._catalog["models"][0]["layers"]
    )
    assert qb._catalog["families"][0]["hids"] == ["paren"]
    q = {
        **qb._query,
        "units": {"toy": [{"layer": "lstm", "units": "0-2"}]},
        "hypotheses": ["position"],
        "measures": ["corr", "mi"],
        "eps": None,
    }
    # what the browser sends on every edit (js/query_builder.js through setTraits)
    qb._handle_custom_msg({"type": "set", "traits": {"_query": q}}, [])
    assert qb._error == ""
    sql = qb.sql
    assert sql.startswith("%%inspect\n") and "USING corr, mi OVER D.seq AS S" in sql
    assert "(U.layer = 'lstm' AND U.unit IN (0, 1, 2))" in sql and "H.hid IN ('position')" in sql
    assert "WITH (eps = NULL, block_size = 256)" in sql
    args = qb.arguments()
    assert args["units"] == [("lstm", [0, 1, 2])] and args["eps"] is None
    assert [f.hids() for f in args["hypotheses"]] == [["position"]]
    qb._query = {**q, "hypotheses": []}
    assert "pick at least one hypothesis" in qb._error


def test_generated_sql_parses_with_the_query_layer(char_model, records, hyps):
    parser = pytest.importorskip("dni_lab.backend.query.parser")
    qb = QueryBuilder(char_model, hyps, {"train": records})
    q = parser.parse(qb.sql.split("\n", 1)[1])
    assert q.inspect is not None and [m.name for m in q.inspect.measures] == ["corr"]


def test_subset_family():
    fam = dl.hypothesis_family(signals=["a", "b"], name="fam")(
        lambda r: {"a": [1] * len(r), "b": [2] * len(r)}
    )
    sub = SubsetFamily(fam, ["b"])
    assert sub.hids() == ["fam.b"] and sub.evaluate("xy") == {"b": [2, 2]}
    assert sub.fingerprint() != SubsetFamily(fam, ["a"]).fingerprint()
    arr = dl.hypothesis_family(signals=["a", "b"], name="arr")(
        lambda r: np.ones((len(r), 2)) * [1, 2]
    )
    assert SubsetFamily(arr, ["b"]).evaluate("xyz").tolist() == [[2.0]] * 3


def test_run_streams_into_the_table_and_stops(char_model, records, hyps):
    qb = QueryBuilder(char_model, hyps, {"train": records * 20})
    qb._query = {
        **qb._query,
        "units": {"toy": [{"layer": "lstm", "units": "*"}]},
        "eps": None,
        "block_size": 16,
    }
    qb._handle_custom_msg({"type": "run"}, [])
    assert qb._running and qb.run is not None
    qb._handle_custom_msg({"type": "stop"}, [])
    qb.run.wait(30)
    qb.table._on_block(qb.run)
    assert qb.run.progress.cancelled and qb.data.height == 24
    assert qb._running is False
    assert qb._repr_mimebundle_()["text/plain"] == repr(qb)
    assert repr(qb) == "<QueryBuilder: 1 models, 2 hypotheses, measures corr, idle>"


def test_default_layer_is_hidden_not_the_embedding():
    from torch import nn

    from dni_lab.widgets.query_builder import default_layer

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.lstm = nn.LSTM(4, 6, batch_first=True)
            self.head = nn.Linear(6, 10)

        def forward(self, x):
            return self.head(self.lstm(self.embed(x))[0])

    m = dl.Model(Net(), encode=lambda rs: None, name="n")
    assert m.positional_layers()[0] == "embed"
    assert default_layer(m) == "lstm"
    only_head = dl.Model(nn.Sequential(nn.Linear(3, 3)), encode=lambda rs: None, name="h")
    assert default_layer(only_head) == only_head.positional_layers()[0]
