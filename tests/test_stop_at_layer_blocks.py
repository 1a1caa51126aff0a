"""``stop_at_layer`` on a timm-style ViT whose blocks are an ``nn.Sequential``.

timm keeps its blocks in an ``nn.Sequential`` (``tests/test_timm.py`` reads real timm
models in a side venv); the blocks the stop counts are that list's entries. A model that is
itself one ``nn.Sequential`` has no block list, and the stop says so.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import dni_lab as dl

IMAGES = [np.random.default_rng(i).random((3, 32, 32)).astype(np.float32) for i in range(4)]


class SequentialBlocks(nn.Module):
    """timm's names (``patch_embed.proj``, ``cls_token``, ``blocks``, ``num_prefix_tokens``)
    with its blocks in an ``nn.Sequential``."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.patch_embed = nn.Module()
        self.patch_embed.patch_size = (8, 8)
        self.patch_embed.proj = nn.Conv2d(3, d, 8, stride=8)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d))
        self.num_prefix_tokens = 1
        self.blocks = nn.Sequential(*[nn.TransformerEncoderLayer(d, 2, 32, batch_first=True)
                                      for _ in range(3)])  # fmt: skip
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], 1)
        return self.norm(self.blocks(x))


def test_the_stop_counts_a_sequential_of_blocks_and_ends_the_pass_there():
    torch.manual_seed(0)
    net = SequentialBlocks().eval()
    m = dl.Model.from_hf(net, name="seqblocks")
    assert m.positional_layers() == ["blocks.0", "blocks.1", "blocks.2"]
    ran = []
    hooks = [b.register_forward_hook(lambda mod, i, o, k=k: ran.append(k))
             for k, b in enumerate(net.blocks)]  # fmt: skip
    try:
        full = dl.activations(m, IMAGES, names=["blocks.0"])  # proves the layout too
        assert set(ran) == {0, 1, 2}
        ran.clear()
        got = dl.activations(m, IMAGES, names=["blocks.0"], stop_at_layer=0)
        assert ran and set(ran) == {0}  # blocks 1 and 2 never ran
    finally:
        for h in hooks:
            h.remove()
    assert torch.equal(torch.as_tensor(got["blocks.0"]), torch.as_tensor(full["blocks.0"]))
    with pytest.raises(dl.LayerError, match="read after block 0"):
        dl.activations(m, IMAGES, names=["blocks.2"], stop_at_layer=0)
    assert not any(b._forward_hooks or b._forward_pre_hooks for b in net.modules())
    assert "forward" not in vars(m)


def test_a_model_that_is_one_sequential_has_no_block_list_to_stop_in():
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    m = dl.Model(net, encode=lambda rs: torch.tensor(np.stack(rs), dtype=torch.float32),
                 name="seq")  # fmt: skip
    records = [np.ones(4, dtype=np.float32)] * 3
    with pytest.raises(dl.DNIError, match="no list of blocks"):
        dl.activations(m, records, names=["0"], stop_at_layer=0)
