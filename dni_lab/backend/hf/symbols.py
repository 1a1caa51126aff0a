"""A Hugging Face model's symbols: each record's tokens, and what a long record becomes.

:class:`HFSymbols` is the part of :class:`~.model.HFModel` that counts symbols: a text
record's tokens as character spans (:meth:`HFSymbols.offsets`, memoized; special tokens
are no symbols), a token-id record's ids checked against the vocabulary
(:mod:`.token_records`), and a record longer than the model reads truncated, skipped
(``skip_long``) or refused with the options that read it (``stride`` windows it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import DNIError
from . import token_records as ids_
from .layers import HFLayers

_MEMO = 65536  # records whose spans are remembered, at most


class HFSymbols(HFLayers):
    """Symbols of :class:`~.model.HFModel` (its base class): tokens, offsets, long records."""

    def _check_long_options(self) -> None:
        if self.truncate and self.skip_long:
            raise DNIError("HFModel: truncate=True reads a long record, skip_long=True skips it; "
                           "pass one of them.")  # fmt: skip
        if self.stride is None:
            return
        n_special = self.tokenizer.num_special_tokens_to_add()
        window = (self.max_length or 0) - n_special
        if self.truncate or self.skip_long or self.record_pool is not None:
            raise DNIError(
                "HFModel: stride= reads long records as windows; "
                "it does not combine with truncate=True, skip_long=True or a record-level pool."
            )
        if not isinstance(self.stride, int) or isinstance(self.stride, bool) or not (
            0 <= self.stride < window
        ):
            raise DNIError(
                f"stride must be a whole number of tokens from 0 to {window - 1} (windows of "
                f"{window} tokens besides {n_special} special ones), got {self.stride!r}."
            )

    # -- symbols --------------------------------------------------------------
    def offsets(self, record: str) -> list[tuple[int, int]]:
        """Character span ``(start, end)`` of each symbol (token) of ``record``.

        With record-level units (``pool="cls"|"last"|"mean"``) one span, the record.
        """
        if not isinstance(record, str):  # before the memo: a list is not hashable
            ids_.record_ids(record, self.name)  # raises for what is neither text nor ids
            raise DNIError(
                f"a token-id record has no character offsets on model {self.name!r}: its "
                "symbols are its tokens; read them with model.token_record(record)."
            )
        spans = self._memo.get(record)
        if spans is None:
            if len(self._memo) >= _MEMO:
                self._memo.clear()
                self._too_long.clear()
            enc = self.tokenizer(
                record, return_offsets_mapping=True, return_special_tokens_mask=True
            )
            special = enc["special_tokens_mask"]
            spans = [tuple(o) for o, s in zip(enc["offset_mapping"], special, strict=True) if not s]
            n = len(enc["input_ids"])
            if self.max_length is not None and n > self.max_length and self.stride is None:
                if self.skip_long:
                    spans = []
                    self._too_long.add(record)
                elif not self.truncate:
                    raise DNIError(
                        f"a record tokenizes to {n} tokens, more than model {self.name!r} reads "
                        f"({self.max_length}): {record[:40]!r}...; pass HFModel(..., "
                        "truncate=True) to read its first tokens, stride=N to read it as "
                        "overlapping windows, or skip_long=True to skip it (counted in the "
                        "frame's provenance)."
                    )
                else:
                    spans = spans[: self.max_length - self.tokenizer.num_special_tokens_to_add()]
            if self.record_pool is not None and spans:
                spans = [(0, len(record))]
            self._memo[record] = spans
        return spans

    def _n_symbols(self, record: Any) -> int:
        ids = ids_.record_ids(record, self.name)
        if ids is None:
            return len(self.offsets(record))
        n = len(ids_.symbol_ids(self._fed_ids(ids), self._specials))
        return min(n, 1) if self.record_pool is not None else n

    def skips(self, record: Any) -> bool:
        """Whether ``record`` is skipped (``skip_long=True`` and longer than ``max_length``)."""
        if not self.skip_long:
            return False
        ids = ids_.record_ids(record, self.name)
        if ids is not None:
            return self.max_length is not None and len(ids) > self.max_length
        return not self.offsets(record) and record in self._too_long

    def check_records(self, records: Sequence[Any]) -> None:
        """Check token-id records before a run reads any: readable, ids in the vocabulary.

        Text records are left to the tokenizer. Raises a ``TokenIdsError`` naming the
        record's position in ``records``.
        """
        for k, r in enumerate(records):
            if not isinstance(r, str):
                ids = ids_.record_ids(r, self.name)
                ids_.check_vocab(ids or (), self._vocab, self.name, f" (record {k:,} of the data)")

    def token_record(self, record: Any) -> ids_.TokenRecord:
        """What a hypothesis reads of a token-id record: its symbols' tokens and ids.

        Parameters
        ----------
        record : list of int or 1-D integer tensor
            A token-id record.

        Returns
        -------
        TokenRecord
            The decoded tokens, one per symbol (special tokens left out), their ids and
            the text they decode to (:class:`.token_records.TokenRecord`).
        """
        ids = ids_.record_ids(record, self.name)
        if ids is None:
            raise DNIError(f"{record[:40]!r} is text, not token ids; model {self.name!r} "
                           "reads its tokens through model.offsets(record).")  # fmt: skip
        fed = ids_.symbol_ids(self._fed_ids(ids), self._specials)
        return ids_.token_record(self.tokenizer, fed)

    def _fed_ids(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        """The ids the model runs for a token-id record: checked, cut or skipped if long."""
        ids_.check_vocab(ids, self._vocab, self.name)
        if self.max_length is None or len(ids) <= self.max_length:
            return ids
        if self.skip_long:
            return ()
        if self.truncate:
            return ids[: self.max_length]
        how = "" if self.stride is None else " (stride= windows text records only)"
        raise DNIError(
            f"a token-id record holds {len(ids)} ids, more than model {self.name!r} reads "
            f"({self.max_length}){how}: {list(ids[:8])}...; pass HFModel(..., truncate=True) "
            "to read its first ids or skip_long=True to skip it, or pass the text."
        )
