"""The user's model is left exactly as found (tests/zoo/state.py's snapshot: every
submodule's training flag, parameters and buffers bitwise, requires_grad, grads, hooks)
after every entry point: dl.inspect (foreground over the whole zoo; background and
cancelled; an exception in the 2nd block), dl.query, %%inspect, dl.verify (ablation,
oracle, perturbation), dl.examples, dl.features (train_sae, ablate) and the Ray cluster.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from zoo import VOCAB, load_all, values
from zoo.harness import NeedsContract, make_model, named_modules_of
from zoo.state import differences, snapshot, user_hooks

import dni_lab as dl

ZOO = load_all()
#: representative subset: (entry, a module the contract reads, string records?)
SUBSET = {
    "wrapper-eval-around-train": ("net.layer1.conv1", False),  # BN CNN in train mode inside
    "wrapper-train-around-eval": ("net.layer1.conv1", False),  # a fresh wrapper around eval
    "gru-batch-first": ("rnn", True),
    "transformer-batch-first": ("encoder.layers.0.linear1", True),
}


def prepared(name: str):
    """The entry's model with a user's hooks and a stale ``.grad`` on one parameter."""
    try:
        model, _kw = make_model(ZOO[name])
    except NeedsContract as exc:
        pytest.skip(str(exc))
    user_hooks(model.module)
    p = next(p for p in model.module.parameters() if p.requires_grad)
    p.grad = torch.full_like(p, 0.25)
    return model, ZOO[name].records()


def hyp(model: dl.Model, raise_after: int | None = None):
    seen = [0]

    @dl.hypothesis(name="zoo", kind="continuous")
    def zoo(record):
        seen[0] += 1
        if raise_after is not None and seen[0] > raise_after:
            raise RuntimeError("a hypothesis failing in the 2nd block")
        return values(record, int(model.symbols(record)))

    return zoo


def assert_unchanged(model: dl.Model, before: dict) -> None:
    diff = differences(before, snapshot(model.module))
    assert not diff, f"model {model.name!r} changed:\n" + "\n".join(diff[:20])


@pytest.mark.parametrize("name", list(ZOO))
def test_inspect_leaves_every_zoo_model_as_found(name):
    """Every named module, read or refused: the model is the user's after each."""
    model, records = prepared(name)
    before = snapshot(model.module)
    for address in named_modules_of(ZOO[name]):
        try:
            dl.inspect(model, [hyp(model)], ["corr"], records, units=[(address, "*")],
                       eps=None, device="cpu", cache=False)  # fmt: skip
        except dl.DNIError:
            pass  # refusals are test_zoo's business; the state is ours
        assert_unchanged(model, before)


@pytest.mark.parametrize("name", list(SUBSET))
def test_an_exception_mid_run_leaves_the_model(name):
    model, records = prepared(name)
    layer, _ = SUBSET[name]
    before = snapshot(model.module)
    with pytest.raises(Exception, match="2nd block"):
        dl.inspect(model, [hyp(model, raise_after=3)], ["corr"], records, units=[(layer, "*")],
                   eps=None, block_size=3, device="cpu", cache=False)  # fmt: skip
    assert_unchanged(model, before)


@pytest.mark.parametrize("name", list(SUBSET))
def test_a_stopped_background_run_leaves_the_model(name):
    """Cancelled from its first block's callback (no sleeps), then waited for."""
    model, records = prepared(name)
    layer, _ = SUBSET[name]
    before = snapshot(model.module)
    first = threading.Event()
    run = dl.inspect(model, [hyp(model)], ["corr"], records * 4, units=[(layer, "*")],
                     eps=None, block_size=3, device="cpu", cache=False, background=True,
                     on_block=lambda _r: first.set())  # fmt: skip
    assert first.wait(60), "no block in 60 s"
    run.cancel()
    assert run.wait(60), "the cancelled run did not finish"
    assert run.progress.records_read < len(records) * 4  # it stopped early
    assert_unchanged(model, before)


@pytest.mark.parametrize("name", list(SUBSET))
def test_query_and_cell_magic_leave_the_model(name, monkeypatch):
    from IPython import get_ipython
    from IPython.testing.globalipapp import start_ipython

    model, records = prepared(name)
    layer, _ = SUBSET[name]
    before = snapshot(model.module)
    cat = dl.Catalog()
    cat.add_model(model)
    cat.add_inputs(records, "zoo_records")
    cat.add_hypothesis(hyp(model))
    sql = ("SELECT * INSPECT U.uid AND H.h USING corr OVER D.seq AS S "
           "FROM models M, units U, hypotheses H, inputs D "
           f"WHERE U.layer = '{layer}'")  # fmt: skip
    frame = dl.query(sql, catalog=cat, eps=None)
    assert frame.height > 0
    assert_unchanged(model, before)
    ip = start_ipython() or get_ipython()  # one shell per process: started once
    ip.run_line_magic("load_ext", "dni_lab")
    monkeypatch.setattr(dl.Catalog, "_default", cat)
    out = ip.run_cell_magic("inspect", "--eps none", sql)
    assert out is not None and out.height == frame.height
    assert_unchanged(model, before)


def evaluate(records, output, device):
    """A task score any of the subset's outputs has: the mean logit."""
    out = output if isinstance(output, torch.Tensor) else output[0]
    return float(out.double().sum()), int(out.numel())


@pytest.mark.parametrize("name", list(SUBSET))
def test_verify_leaves_the_model(name):
    model, records = prepared(name)
    layer, strings = SUBSET[name]
    before = snapshot(model.module)
    units = [0, 1, 2]
    v = dl.verify.ablation(model, records, layer, units, ks=[2], evaluate=evaluate,
                           n_random=3, device="cpu")  # fmt: skip
    assert v is not None
    assert_unchanged(model, before)
    dl.verify.oracle(model, records, layer, units, hyp(model), ks=[2], evaluate=evaluate,
                     n_random=3, device="cpu")  # fmt: skip
    assert_unchanged(model, before)
    if strings:  # swap rules act on characters
        early = dl.hypothesis(kind="binary", name="early")(lambda r: [c in "abcd" for c in r])
        dl.verify.perturbation(model, records, layer, units, early, dl.verify.SwapRules(VOCAB),
                               n_random=3, device="cpu")  # fmt: skip
        assert_unchanged(model, before)


@pytest.mark.parametrize("name", list(SUBSET))
def test_examples_and_features_leave_the_model(name, tmp_path):
    from dni_lab import features as F

    model, records = prepared(name)
    layer, _ = SUBSET[name]
    before = snapshot(model.module)
    index = dl.examples.NeuronIndex(layer, ratio=0.5, n_partitions=2, device="cpu")
    index.fit(model, records)
    assert_unchanged(model, before)
    trained = F.train_sae(model, records, layer, d_sae=16, k=2, path=tmp_path / "sae",
                          device="cpu", verbose=False)  # fmt: skip
    assert_unchanged(model, before)
    F.ablate(model, trained.features, [0, 1], records, evaluate=evaluate, n_random=2,
             device="cpu")  # fmt: skip
    assert_unchanged(model, before)


def test_a_cluster_run_leaves_the_model():
    pytest.importorskip("ray")
    model, records = prepared("gru-batch-first")
    before = snapshot(model.module)
    frame = dl.inspect(model, [hyp(model)], ["corr"], records, units=[("rnn", "*")],
                       eps=None, cache=False, cluster=1)  # fmt: skip
    assert frame.height == 10
    assert np.isfinite(frame["unit_score"].to_numpy()).all()
    assert_unchanged(model, before)
