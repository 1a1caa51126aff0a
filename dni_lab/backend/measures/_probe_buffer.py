"""Rows a probe state keeps, grown in place: amortised appends instead of one copy per block.

A probe keeps every row it read (``X``, ``Y``, folds, record codes, ...). Appending a
block with ``torch.cat`` copies all the rows kept so far, so reading ``n`` rows in
blocks of ``b`` copied ``n² / 2b`` rows: on the demo's 450,000 rows that was a tenth of
the inspection. :func:`append` writes a block into spare capacity instead, doubling a
buffer when it is full, and leaves the state's field a view of the buffer's filled
prefix, so every reader sees the same ``(n, ...)`` tensor as before.

The buffers belong to one state (``store``): a merged or restricted state that shares
a field's tensor but not its buffer copies it on its first append, so no two states
ever write into one buffer. :func:`compact` gives a state's fields without the spare
capacity, for pickling (a view pickles its whole storage).
"""

from __future__ import annotations

import torch

#: Rows a new buffer holds at least.
MIN_ROWS = 1024


def append(state: object, store: dict[str, torch.Tensor], new: dict[str, torch.Tensor]) -> None:
    """Append ``new`` (field name → rows, one row count) to ``state``'s fields in place.

    Parameters
    ----------
    state
        Any object whose fields ``new`` names hold ``(n, ...)`` tensors of one ``n``.
    store
        The state's own buffers by field name; a field whose tensor is not the filled
        prefix of its buffer (a merged state's, a restricted copy's) gets a new buffer.
    new
        The rows to append, converted to each field's dtype and device.
    """
    for name, rows in new.items():
        cur = getattr(state, name)
        n0, n1 = cur.shape[0], cur.shape[0] + rows.shape[0]
        buf = store.get(name)
        owned = (
            buf is not None
            and buf.data_ptr() == cur.data_ptr()
            and buf.shape[1:] == cur.shape[1:]
            and buf.dtype == cur.dtype
        )
        if not owned or buf.shape[0] < n1:
            cap = max(n1, 2 * n0, MIN_ROWS)
            buf = torch.empty((cap, *cur.shape[1:]), dtype=cur.dtype, device=cur.device)
            buf[:n0] = cur
            store[name] = buf
        buf[n0:n1] = rows.to(buf.device, buf.dtype)
        setattr(state, name, buf[:n1])


def compact(fields: dict[str, object], store: dict[str, torch.Tensor]) -> dict[str, object]:
    """``fields`` (a state's ``__dict__``) with buffered tensors copied to their own
    storage and no buffers: what a pickled state carries."""
    out = dict(fields)
    for name in store:
        t = out.get(name)
        if isinstance(t, torch.Tensor):
            out[name] = t.clone()
    out["store"] = {}
    return out
