"""What goes wrong on the way to a cluster is said in a few lines, before Ray starts.

An unreachable address, a model or hypothesis that does not pickle (named down to the
attribute), ``workers=`` without ``cluster=``. None of these tests starts Ray.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
from conftest import CharLM, encode_chars, paren, random_records

import dni_lab as dl

ray = pytest.importorskip("ray")


def _model() -> dl.Model:
    torch.manual_seed(0)
    return dl.Model(CharLM(hidden=8), encode=encode_chars, name="toy")


def short(exc: BaseException) -> str:
    """The message, checked to be short: ≤ 20 lines, no dump of records or plans."""
    text = str(exc)
    assert len(text.splitlines()) <= 20 and len(text) < 800, text
    assert exc.__cause__ is None and exc.__suppress_context__, "no chained Ray dump"
    return text


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_an_unreachable_address_fails_at_once_naming_it(address):
    if ray.is_initialized():
        pytest.skip("another module left Ray connected: connect() would use that one")
    with pytest.raises(dl.DNIError) as e:
        dl.inspect(_model(), [paren], ["corr"], random_records(20), cache=False,
                   cluster=address)  # fmt: skip
    text = short(e.value)
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in text and "ray start --head" in text
    assert not ray.is_initialized()


@pytest.mark.parametrize("server", ["silent", "http"])
def test_a_listener_that_is_not_ray_is_named_within_seconds(server):
    """A port where something else listens: ray.init would wait for minutes (300 s with
    an address, 42 s with ray://); the gRPC handshake says at once it is not Ray."""
    import http.server
    import socket
    import threading

    if ray.is_initialized():
        pytest.skip("another module left Ray connected: connect() would use that one")
    if server == "http":
        srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        port, stop = srv.server_address[1], srv.shutdown
    else:  # accepts, never says a word
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        held = []
        threading.Thread(target=lambda: held.append(sock.accept()), daemon=True).start()
        port, stop = sock.getsockname()[1], sock.close
    try:
        for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
            t0 = time.monotonic()
            with pytest.raises(dl.DNIError) as e:
                dl.inspect(_model(), [paren], ["corr"], random_records(20), cache=False,
                           cluster=address)  # fmt: skip
            took = time.monotonic() - t0
            text = short(e.value)
            assert f"something listens at 127.0.0.1:{port}" in text and "gRPC" in text
            assert len(text.splitlines()) <= 5 and took <= 5.0, (took, text)
            assert not ray.is_initialized()
    finally:
        stop()


def test_an_unroutable_address_fails_within_seconds_in_a_few_lines():
    if ray.is_initialized():
        pytest.skip("another module left Ray connected: connect() would use that one")
    t0 = time.monotonic()
    with pytest.raises(dl.DNIError) as e:  # TEST-NET-1: never routed
        dl.inspect(_model(), [paren], ["corr"], random_records(20), cache=False,
                   cluster="192.0.2.1:6379")  # fmt: skip
    text = short(e.value)
    assert time.monotonic() - t0 <= 5.0 and len(text.splitlines()) <= 5
    assert "cannot reach the Ray cluster at 192.0.2.1:6379" in text


def test_an_unpicklable_model_is_named_down_to_the_attribute_before_ray_starts():
    was_up = ray.is_initialized()
    model = _model()
    model.module.helper = type("Helper", (), {})()
    model.module.helper.lock = threading.Lock()
    with pytest.raises(dl.DNIError) as e:
        dl.inspect(model, [paren], ["corr"], random_records(200), cache=False, cluster=2)
    text = short(e.value)
    assert "model 'toy' does not pickle: module.helper.lock is a _thread.lock" in text
    assert "cannot pickle '_thread.lock'" in text
    assert ray.is_initialized() == was_up  # said before any Ray start-up


def test_an_unpicklable_hypothesis_names_its_closure_variable():
    lock = threading.Lock()

    def locked(r):
        with lock:
            return [0.0] * len(r)

    with pytest.raises(dl.DNIError) as e:
        dl.inspect(_model(), [locked], ["corr"], random_records(20), cache=False, cluster=2)
    text = short(e.value)
    assert "hypothesis 'locked' does not pickle: " in text
    assert "closure variable lock is a _thread.lock" in text


def test_workers_without_a_cluster_is_an_error_not_ignored():
    recs = random_records(20)
    with pytest.raises(dl.DNIError, match=r"workers=2 needs cluster=: pass cluster='local'"):
        dl.inspect(_model(), [paren], ["corr"], recs, workers=2)
    with pytest.raises(dl.DNIError, match="workers=3 needs cluster="):
        dl.examples.NeuronIndex("lstm", device="cpu").fit(_model(), recs, workers=3)
    with pytest.raises(dl.DNIError, match="workers=2 needs cluster="):
        dl.verify.permutation_test(_model(), [paren], recs, n_permutations=10, workers=2)
    ns = {"lm": _model(), "texts": recs, "hyps": [paren]}
    with pytest.raises(dl.DNIError, match="workers=2 needs cluster="):
        dl.query("SELECT * INSPECT lm AND hyps OVER texts WITH (workers = 2)", namespace=ns)


def test_the_ray_extra_brings_ray_client():
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extra = project["project"]["optional-dependencies"]["ray"]
    extras = [d.replace(" ", "").partition("[")[2].partition("]")[0].split(",") for d in extra]
    assert any("client" in e for e in extras), extra
    pytest.importorskip("grpc")  # what cluster='ray://host:10001' needs, installed with it
