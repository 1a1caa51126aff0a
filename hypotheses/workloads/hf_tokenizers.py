"""Tokenizers trained here (the ``tokenizers`` package), wrapped for ``transformers``.

Nothing is downloaded: a byte-level BPE (GPT-2 style) or a WordPiece (BERT
style) vocabulary is learnt from the records it will read. Training is
deterministic for a given corpus and size, and
:func:`dni_lab.backend.hf.tokenizer_hash` names the result, so a model store key
can include the exact vocabulary.
"""

from __future__ import annotations

import itertools
from collections import Counter
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
    """A BERT-style WordPiece tokenizer: lower-cased, ``[CLS] text [SEP]``.

    The vocabulary is learnt here, not by ``tokenizers``' ``WordPieceTrainer``: that
    one breaks ties between equally frequent merges in hash-map order, so training
    twice on the same text gave different ids. Here ties go to the smaller pair.
    """
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    words: Counter[str] = Counter()
    for text in corpus:
        words.update(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    vocab = _wordpiece_vocab(words, vocab_size)
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
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


def _wordpiece_vocab(words: Counter[str], vocab_size: int) -> dict[str, int]:
    """Specials, every character (word-initial and ``##`` continuation), then merges.

    The most frequent adjacent pair of pieces merges first, ties to the smaller pair.
    """
    splits = {w: [w[0]] + [f"##{c}" for c in w[1:]] for w in sorted(words) if w}
    pieces = list(BERT_SPECIALS) + sorted({p for s in splits.values() for p in s})
    while len(pieces) < vocab_size:
        pairs: Counter[tuple[str, str]] = Counter()
        for w, s in splits.items():
            for pair in itertools.pairwise(s):
                pairs[pair] += words[w]
        if not pairs:
            break
        a, b = min(pairs, key=lambda p: (-pairs[p], p))
        merged = a + b.removeprefix("##")
        for s in splits.values():
            i = 0
            while i < len(s) - 1:
                if s[i] == a and s[i + 1] == b:
                    s[i : i + 2] = [merged]
                i += 1
        if merged not in pieces:
            pieces.append(merged)
    return {p: i for i, p in enumerate(pieces)}
