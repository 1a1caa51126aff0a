"""Hugging Face transformers as inspectable models (``dni_lab[hf]``)."""

from .align import AlignedFamily, pool_spans
from .model import HFModel, tokenizer_hash

__all__ = ["AlignedFamily", "HFModel", "pool_spans", "tokenizer_hash"]
