"""Hugging Face transformers as inspectable models (``dni_lab[hf]``)."""

from ..extraction.models import ADAPTERS
from .align import AlignedFamily, pool_spans
from .attention import has_target
from .model import HFModel, tokenizer_hash
from .token_records import TokenRecord

ADAPTERS["hf"] = HFModel  # Model.from_hf

__all__ = [
    "AlignedFamily",
    "HFModel",
    "TokenRecord",
    "has_target",
    "pool_spans",
    "tokenizer_hash",
]
