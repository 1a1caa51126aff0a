"""Vision transformers read with no declaration (``dl.Model.from_hf(module)``): patches are
the symbols, [CLS]/distillation/register tokens the prefix, the patch projection's map its
own grid of patches; every module is compared with a hand hook like any other entry."""

from __future__ import annotations

from . import entry, images, seeded
from .reference import Read

SEQ = Read("n s u")
#: the patch embedding runs before the prefix tokens are added: no prefix there
PATCHES = {"embeddings.patch_embeddings.projection": Read("n u s s", prefix=0, grid=True),
           "embeddings.patch_embeddings": Read("n s u", prefix=0), "*": SEQ}  # fmt: skip
SMALL = dict(num_hidden_layers=2, image_size=32, patch_size=8, hidden_size=32,
             num_attention_heads=2)  # fmt: skip


def square_images() -> list:
    """32 x 32 images: a ViT reads the size it was built for (a 4 x 4 grid of patches)."""
    return images(n=6, shape=(3, 32, 32), seed=7)


@entry("hf-vit", square_images, PATCHES, family="vision")
def hf_vit():
    from transformers import ViTConfig, ViTModel

    seeded(50)
    return ViTModel(ViTConfig(**SMALL, intermediate_size=64), add_pooling_layer=False).eval(), {
        "from_hf": True}


@entry("hf-dinov2-registers", square_images, PATCHES, family="vision")
def hf_dinov2_registers():
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    seeded(51)
    cfg = Dinov2WithRegistersConfig(**SMALL, num_register_tokens=4)
    return Dinov2WithRegistersModel(cfg).eval(), {"from_hf": True}
