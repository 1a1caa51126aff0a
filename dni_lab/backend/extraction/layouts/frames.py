"""Frames as symbols: a long signal cut into frames, each frame one symbol.

Audio and video models often take a batch of frames, not a batch of records: a
pitch tracker runs on 1,024-sample windows, one window per batch row. With
:class:`Frames` a record is the whole signal, a symbol is one of its frames, and the
model's batch axis holds every record's frames one after the other; declare
``Model(..., frames=True)`` so that every layer's batch axis is read as frames (and
the axes inside a frame are reduced with ``reduce=``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...errors import DNIError


@dataclass(frozen=True)
class Frames:
    """Cut 1-D signals into frames of ``length`` samples every ``hop`` samples.

    Parameters
    ----------
    length : int
        Samples per frame.
    hop : int
        Samples between the starts of two frames.
    center : bool
        Pad ``length // 2`` zeros at both ends, so frame ``i`` is centred on sample
        ``i * hop`` (as librosa and torchcrepe frame); else frames start at 0.

    Examples
    --------
    >>> fr = Frames(4, hop=2, center=False)
    >>> fr.symbols(np.arange(8.0))
    3
    >>> tuple(fr.encode([np.arange(8.0)]).shape)
    (3, 4)
    """

    length: int
    hop: int
    center: bool = True

    def __post_init__(self) -> None:
        if self.length < 1 or self.hop < 1:
            raise DNIError(f"Frames(length={self.length}, hop={self.hop}): both must be >= 1.")

    def _signal(self, record: Any) -> np.ndarray:
        x = np.asarray(record, dtype=np.float32)
        if x.ndim != 1:
            raise DNIError(
                f"Frames cuts 1-D signals; a record has shape {x.shape}. Pass each record as "
                "one channel of samples."
            )
        if self.center:
            x = np.pad(x, self.length // 2)
        return x

    def symbols(self, record: Any) -> int:
        """Frames in ``record``: its symbols."""
        n = len(self._signal(record))
        return 0 if n < self.length else 1 + (n - self.length) // self.hop

    def centers(self, record: Any) -> np.ndarray:
        """The sample each frame is centred on, for hypotheses made per frame."""
        k = np.arange(self.symbols(record))
        return k * self.hop + (0 if self.center else self.length // 2)

    def frames(self, record: Any) -> np.ndarray:
        """``(symbols(record), length)`` frames of one record."""
        x = self._signal(record)
        n = self.symbols(record)
        idx = np.arange(self.length)[None, :] + self.hop * np.arange(n)[:, None]
        return x[idx]

    def encode(self, records: Sequence[Any]) -> torch.Tensor:
        """Every record's frames, one record after the other: ``(total frames, length)``."""
        parts = [self.frames(r) for r in records]
        if not parts:
            return torch.zeros(0, self.length)
        return torch.from_numpy(np.concatenate(parts)).float()
