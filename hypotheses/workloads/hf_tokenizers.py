"""Tokenizers trained here (the ``tokenizers`` package), wrapped for ``transformers``.

Nothing is downloaded: a byte-level BPE (GPT-2 style) or a WordPiece (BERT
style) vocabulary is learnt from the records it will read. Training is
deterministic for a given corpus and size, and
:func:`dni_lab.backend.hf.tokenizer_hash` names the result, so a model store key
can include the exact vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

EOS = "<|endoftext|>"
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def bpe(corpus: Iterable[str], vocab_size: int = 256, bos: bool = False) -> Any:
    """A GPT-2-style byte-level BPE tokenizer (``<|endoftext|>`` is BOS, EOS and padding).

    ``bos=True`` prefixes every text with ``<|endoftext|>`` (a special token), so
    a language model trained on it sees the first real token in context.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer)
    if bos:
        eos = tok.token_to_id(EOS)
        tok.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=True),
                processors.TemplateProcessing(single=f"{EOS} $A", special_tokens=[(EOS, eos)]),
            ]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=EOS
    )


def wordpiece(corpus: Iterable[str], vocab_size: int = 200) -> Any:
    """A BERT-style WordPiece tokenizer: lower-cased, ``[CLS] text [SEP]``."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=BERT_SPECIALS, show_progress=False
    )
    tok.train_from_iterator(list(corpus), trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
