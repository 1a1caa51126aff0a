"""dl.features: each format and architecture read back, encode/decode = the equations."""

from __future__ import annotations

import json

import pytest
import torch

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.errors import DNIError

D_IN, D_SAE = 6, 10


def filled(fs: F.FeatureSet, seed: int = 0) -> F.FeatureSet:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in fs.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * 0.5)
    return fs


def x_batch(d: int = D_IN, seed: int = 1) -> torch.Tensor:
    return torch.randn(3, 4, d, generator=torch.Generator().manual_seed(seed))


def relu(t):
    return torch.clamp(t, min=0)


# hand-written equations (SAELens' definitions), independent of the classes
def ref_encode(fs, x):
    a = fs.architecture
    x = x.to(fs.dtype)
    if fs.normalize_activations == "constant_norm_rescale":
        x = x * (fs.d_in**0.5 / torch.sqrt((x * x).sum(-1, keepdim=True)))
    elif fs.normalize_activations == "layer_norm":
        mu = x.mean(-1, keepdim=True)
        sd = torch.sqrt(((x - mu) ** 2).sum(-1, keepdim=True) / (x.shape[-1] - 1))
        x = (x - mu) / (sd + 1e-5)
    if fs.apply_b_dec_to_input:
        x = x - fs.b_dec
    W, d = fs.W_enc.detach(), fs.d_sae
    if a == "gated":
        gate = (torch.einsum("...i,ij->...j", x, W) + fs.b_gate) > 0
        mag = relu(torch.einsum("...i,ij->...j", x, W * torch.exp(fs.r_mag)) + fs.b_mag)
        return gate * mag
    pre = torch.einsum("...i,ij->...j", x, W) + fs.b_enc
    if a == "topk":
        if fs.rescale_acts_by_decoder_norm:
            pre = pre * torch.sqrt((fs.W_dec**2).sum(-1))
        flat = pre.reshape(-1, d)
        out = torch.zeros_like(flat)
        for r in range(flat.shape[0]):
            order = sorted(range(d), key=lambda j: -float(flat[r, j]))[: fs.k]
            for j in order:
                out[r, j] = max(float(flat[r, j]), 0.0)
        return out.reshape(pre.shape)
    if "jumprelu" in a:
        return relu(pre) * (pre > fs.threshold)
    return relu(pre)


def ref_decode(fs, z, x):
    W = fs.W_dec.detach()
    if fs.architecture == "topk" and fs.rescale_acts_by_decoder_norm:
        z = z / torch.sqrt((W**2).sum(-1))
    out = torch.einsum("...j,jo->...o", z, W) + fs.b_dec
    if "skip" in fs.architecture:
        out = out + torch.einsum("...i,oi->...o", x, fs.W_skip)
    return out


def make(arch: str, **kw) -> F.FeatureSet:
    cls = F.ARCHITECTURES[arch]
    if arch == "topk":
        kw.setdefault("k", 3)
    if "transcoder" in arch:
        kw.setdefault("d_out", D_IN + 2)
        kw.setdefault("hook_out", "blocks.0.hook_mlp_out")
    return filled(cls(D_IN, D_SAE, "blocks.0.hook_resid_post", name=arch, **kw))


CASES = [
    ("standard", {}),
    ("gated", {}),
    ("topk", {}),
    ("topk", {"rescale_acts_by_decoder_norm": True}),
    ("jumprelu", {}),
    ("standard", {"apply_b_dec_to_input": False}),
    ("standard", {"normalize_activations": "constant_norm_rescale"}),
    ("standard", {"normalize_activations": "layer_norm"}),
    ("transcoder", {}),
    ("skip_transcoder", {}),
    ("jumprelu_transcoder", {}),
    ("jumprelu_skip_transcoder", {}),
]


@pytest.mark.parametrize(("arch", "kw"), CASES)
def test_saelens_layout_round_trip_matches_the_equations(tmp_path, arch, kw):
    fs = make(arch, **kw)
    F.save(fs, tmp_path / "sae")
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["architecture"] == arch
    assert cfg["metadata"]["hook_name"] == "blocks.0.hook_resid_post"
    assert cfg["metadata"]["sae_lens_version"].startswith("6.")
    back = dl.features.load(tmp_path / "sae")
    assert type(back) is type(fs) and back.hook == fs.hook and back.name == arch
    x = x_batch()
    with torch.no_grad():
        z = back.encode(x)
        torch.testing.assert_close(z, ref_encode(back, x), rtol=1e-5, atol=1e-6)
        assert not torch.equal(z, torch.zeros_like(z))  # the case tests something
        recon = back.decode(z, x)
        want = ref_decode(back, z, x)
        if back.normalize_activations == "constant_norm_rescale":
            want = want / (D_IN**0.5 / x.norm(dim=-1, keepdim=True))
        elif back.normalize_activations == "layer_norm":
            mu, sd = x.mean(-1, keepdim=True), x.std(-1, keepdim=True)
            want = want * sd + mu
        torch.testing.assert_close(recon, want, rtol=1e-5, atol=1e-5)
    if arch == "topk":
        assert int((z != 0).sum(-1).max()) <= 3


def test_pre_v6_config_reads_hook_point_and_topk_kwargs(tmp_path):
    fs = make("topk", k=2)
    F.save(fs, tmp_path / "old")
    cfg = json.loads((tmp_path / "old" / "cfg.json").read_text())
    old = {
        "d_in": D_IN, "d_sae": D_SAE, "dtype": "float32", "hook_point": "blocks.2.hook_resid_pre",
        "hook_layer": 2, "activation_fn_str": "topk", "activation_fn_kwargs": {"k": 2},
        "apply_b_dec_to_input": cfg["apply_b_dec_to_input"], "normalize_activations": False,
    }  # fmt: skip
    (tmp_path / "old" / "cfg.json").write_text(json.dumps(old))
    back = dl.features.load(tmp_path / "old")
    assert back.architecture == "topk" and back.k == 2
    assert back.hook == "blocks.2.hook_resid_pre"
    x = x_batch()
    torch.testing.assert_close(back.encode(x), fs.encode(x))


def test_sparsity_file_is_read(tmp_path):
    fs = make("standard")
    fs.log_sparsity = torch.linspace(-5, -1, D_SAE)
    F.save(fs, tmp_path / "s")
    assert (tmp_path / "s" / "sparsity.safetensors").exists()
    torch.testing.assert_close(dl.features.load(tmp_path / "s").log_sparsity, fs.log_sparsity)


def test_sparsify_hook_directories(tmp_path):
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(3)
    enc_w, enc_b = torch.randn(D_SAE, D_IN, generator=g), torch.randn(D_SAE, generator=g)
    W_dec, b_dec = torch.randn(D_SAE, D_IN, generator=g), torch.randn(D_IN, generator=g)
    for h in ("h.0", "h.1"):
        d = tmp_path / "run" / h
        d.mkdir(parents=True)
        (d / "cfg.json").write_text(json.dumps({"k": 4, "num_latents": D_SAE, "d_in": D_IN}))
        save_file(
            {"encoder.weight": enc_w, "encoder.bias": enc_b, "W_dec": W_dec, "b_dec": b_dec},
            str(d / "sae.safetensors"),
        )
    with pytest.raises(DNIError, match="h.0.*h.1.*hook="):
        dl.features.load(tmp_path / "run")
    fs = dl.features.load(tmp_path / "run", hook="h.1")
    assert fs.hook == "h.1" and fs.architecture == "topk" and fs.k == 4
    x = x_batch()
    # sparsify's own definition: TopK(ReLU(linear(x - b_dec)))
    pre = relu((x - b_dec) @ enc_w.T + enc_b)
    vals, idx = pre.topk(4, dim=-1)
    want = torch.zeros_like(pre).scatter(-1, idx, vals)
    torch.testing.assert_close(fs.encode(x), want)
    torch.testing.assert_close(fs.decode(want), want @ W_dec + b_dec)
    assert dl.features.load(tmp_path / "run" / "h.0").hook == "h.0"


@pytest.mark.parametrize(
    "kind", ["AutoEncoder", "AutoEncoderTopK", "BatchTopKSAE", "JumpReluAutoEncoder"]
)
def test_dictionary_learning_files(tmp_path, kind):
    g = torch.Generator().manual_seed(4)
    enc = torch.nn.Linear(D_IN, D_SAE)
    dec = torch.nn.Linear(D_SAE, D_IN, bias=False)
    for p in (*enc.parameters(), *dec.parameters()):
        p.data = torch.randn(p.shape, generator=g)
    bias = torch.randn(D_IN, generator=g)
    x = x_batch()
    if kind == "JumpReluAutoEncoder":
        thr = torch.rand(D_SAE, generator=g)
        state = {"W_enc": enc.weight.T.clone(), "b_enc": enc.bias.data,
                 "W_dec": dec.weight.T.clone(), "b_dec": bias, "threshold": thr}  # fmt: skip
        pre = x @ state["W_enc"] + state["b_enc"]  # apply_b_dec_to_input defaults to False
        want = relu(pre * (pre > thr))
    else:
        key = "bias" if kind == "AutoEncoder" else "b_dec"
        state = {"encoder.weight": enc.weight.data, "encoder.bias": enc.bias.data,
                 "decoder.weight": dec.weight.data, key: bias}  # fmt: skip
        post = relu((x - bias) @ enc.weight.data.T + enc.bias.data)
        if kind == "AutoEncoderTopK":
            state["k"] = torch.tensor(3)
            vals, idx = post.topk(3, dim=-1)
            want = torch.zeros_like(post).scatter(-1, idx, vals)
        elif kind == "BatchTopKSAE":
            state["k"], state["threshold"] = torch.tensor(3), torch.tensor(0.7)
            want = post * (post > 0.7)
        else:
            want = post
    torch.save(state, tmp_path / "ae.pt")
    cfg = {"trainer": {"dict_class": kind, "activation_dim": D_IN, "dict_size": D_SAE, "layer": 1,
                       "submodule_name": "resid_post_layer_1"}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    fs = dl.features.load(tmp_path)
    assert fs.hook == "blocks.1.hook_resid_post"
    z = fs.encode(x)
    torch.testing.assert_close(z, want)
    torch.testing.assert_close(fs.decode(z), z @ dec.weight.data.T + bias)


def test_clear_errors(tmp_path):
    fs = make("standard")
    F.save(fs, tmp_path / "a")
    cfg = json.loads((tmp_path / "a" / "cfg.json").read_text())
    (tmp_path / "a" / "cfg.json").write_text(json.dumps({**cfg, "architecture": "wavelet"}))
    with pytest.raises(DNIError, match="unknown feature-set architecture 'wavelet'"):
        dl.features.load(tmp_path / "a")
    (tmp_path / "a" / "cfg.json").write_text(json.dumps({**cfg, "dtype": "bfloat16"}))
    with pytest.raises(DNIError, match="stored as float32 but the config says dtype bfloat16"):
        dl.features.load(tmp_path / "a")
    assert dl.features.load(tmp_path / "a", dtype="float32").dtype == torch.float32
    (tmp_path / "a" / "cfg.json").write_text(
        json.dumps({**cfg, "normalize_activations": "expected_average_only_in"})
    )
    with pytest.raises(DNIError, match="expected_average_only_in.*scaling_factor=c"):
        dl.features.load(tmp_path / "a")
    (tmp_path / "a" / "cfg.json").write_text(
        json.dumps({**cfg, "normalize_activations": "covariance_whitening"})
    )
    with pytest.raises(DNIError, match="covariance_whitening.*not implemented"):
        dl.features.load(tmp_path / "a")
    (tmp_path / "a" / "cfg.json").write_text(json.dumps(cfg))
    (tmp_path / "a" / "sae_weights.safetensors").unlink()
    with pytest.raises(DNIError, match="no sae_weights.safetensors"):
        dl.features.load(tmp_path / "a")
    with pytest.raises(DNIError, match="does not exist"):
        dl.features.load(tmp_path / "nowhere")
    with pytest.raises(DNIError, match="encodes 6-wide activations; got 5"):
        fs.encode(torch.zeros(2, 5))


def test_incomplete_or_invalid_configs_name_the_file_and_the_key(tmp_path):
    fs = make("topk", k=2)
    F.save(fs, tmp_path / "t")
    file = tmp_path / "t" / "cfg.json"
    cfg = json.loads(file.read_text())
    for key in ("k", "d_sae"):
        file.write_text(json.dumps({k: v for k, v in cfg.items() if k != key}))
        with pytest.raises(DNIError, match=rf"cfg\.json has no '{key}'"):
            dl.features.load(tmp_path / "t")
    file.write_text(json.dumps(cfg)[:-7])  # truncated
    with pytest.raises(DNIError, match=r"cfg\.json is not valid JSON"):
        dl.features.load(tmp_path / "t")
    file.write_text("[1, 2]")
    with pytest.raises(DNIError, match="not an object"):
        dl.features.load(tmp_path / "t")
