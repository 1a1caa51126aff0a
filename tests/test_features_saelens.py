"""Interoperability with the real sae-lens, run in its side environment (`make saelens-env`).

sae-lens pulls transformer-lens, datasets, plotly and more, so it is not a dependency:
`make test` builds it into .dni_cache/saelens-venv, and this test runs that python in a
subprocess (tests/saelens_side.py) on files written here, then reads what it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import CharLM, encode_chars, random_records

import dni_lab as dl
from dni_lab import features as F
from dni_lab.backend.errors import DNIError

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".dni_cache" / "saelens-venv"
SIDE = Path(os.environ.get("DNI_LAB_SAELENS_PYTHON", VENV / "bin" / "python"))
# the Makefile stamps the venv only once sae-lens installed (a python alone is not enough)
READY = SIDE.exists() and ("DNI_LAB_SAELENS_PYTHON" in os.environ or (VENV / ".installed").exists())

pytestmark = pytest.mark.skipif(
    not READY,
    reason=f"sae-lens side environment missing ({SIDE}); build it with `make saelens-env`",
)
D_IN, D_SAE, K = 12, 32, 4
FACTOR = 2.5


def random_set(arch: str, **kw) -> F.FeatureSet:
    if "transcoder" in arch:
        kw.update(d_out=D_IN + 3, hook_out="blocks.0.hook_mlp_out")
    fs = F.ARCHITECTURES[arch](D_IN, D_SAE, "blocks.0.hook_resid_post", name=arch, **kw)
    g = torch.Generator().manual_seed(len(arch))
    with torch.no_grad():
        for p in fs.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return fs


def test_sae_lens_reads_our_files_and_we_read_theirs(tmp_path):
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    lm = dl.Model(CharLM(), encode=encode_chars, name="char-lm")
    trained = F.train_sae(lm, random_records(200), "lstm", d_sae=D_SAE, k=K,
                          path=tmp_path / "trained", verbose=False)  # fmt: skip
    ours = {"trained": trained.features}
    for arch, kw in [
        ("standard", {"normalize_activations": "layer_norm"}),
        ("topk", {"k": K, "rescale_acts_by_decoder_norm": True}),
        ("jumprelu", {}),
        ("gated", {}),
        ("transcoder", {}),
        ("skip_transcoder", {}),
        ("jumprelu_transcoder", {}),
    ]:
        ours[arch] = random_set(arch, **kw)
        F.save(ours[arch], tmp_path / arch)
    x = torch.randn(7, D_IN, generator=torch.Generator().manual_seed(1))
    save_file({"x": x}, str(tmp_path / "x.safetensors"))
    dirs = [str(tmp_path / name) for name in ours]
    theirs = {a: str(tmp_path / f"theirs-{a}") for a in ("standard", "topk", "jumprelu")}
    scaled = [str(tmp_path / "checkpoint"), str(tmp_path / "scaled-no-file")]
    job = {"inputs": str(tmp_path / "x.safetensors"), "ours": dirs, "theirs": theirs,
           "d_in": D_IN, "d_sae": D_SAE, "k": K, "scaled": scaled, "factor": FACTOR,
           "out": str(tmp_path / "out.safetensors")}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    proc = subprocess.run(
        [str(SIDE), str(ROOT / "tests" / "saelens_side.py"), str(tmp_path / "job.json")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads(proc.stdout.strip().splitlines()[-1])
    assert meta["version"] == "6.54.0"
    got = load_file(str(tmp_path / "out.safetensors"))
    for i, (name, fs) in enumerate(ours.items()):
        seen = meta["ours"][dirs[i]]
        assert seen["hook_name"] == fs.hook, (name, seen)  # read as v6: the hook survived
        assert seen["architecture"] == fs.architecture
        with torch.no_grad():
            z = fs.encode(x)
            torch.testing.assert_close(got[f"ours{i}.z"], z, atol=1e-5, rtol=1e-5)
            if "skip" not in name:  # sae-lens' decode has no skip path (its forward has)
                recon = got[f"ours{i}.recon"]
                torch.testing.assert_close(recon, fs.decode(z, x), atol=1e-5, rtol=1e-5)
    for arch, d in theirs.items():
        fs = dl.features.load(d)
        assert fs.architecture == arch and fs.hook == "blocks.0.hook_resid_post"
        with torch.no_grad():
            torch.testing.assert_close(fs.encode(x), got[f"theirs.{arch}.z"], atol=1e-5, rtol=1e-5)
    # the input scaling factor of a checkpoint, folded as SAELens folds it when training ends
    fs = dl.features.load(scaled[0])
    assert fs.meta["folded_scaling_factor"] == FACTOR and fs.normalize_activations == "none"
    by_hand = dl.features.load(scaled[1], scaling_factor=FACTOR)
    with torch.no_grad():
        for f in (fs, by_hand):
            torch.testing.assert_close(f.encode(x), got["theirs.scaled.z"], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(f.decode(f.encode(x), x), got["theirs.scaled.recon"],
                                       atol=1e-5, rtol=1e-5)  # fmt: skip
    with pytest.raises(DNIError, match="scaling_factor=c"):
        dl.features.load(scaled[1])
    with pytest.raises(DNIError, match="positive number"):
        dl.features.load(scaled[1], scaling_factor=-1)
    with pytest.raises(DNIError, match="Drop scaling_factor"):
        dl.features.load(theirs["standard"], scaling_factor=2.0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
