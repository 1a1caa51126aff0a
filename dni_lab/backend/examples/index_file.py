"""A :class:`~.index.NeuronIndex` on disk: one ``.npz`` of plain arrays, read defensively.

This module knows the index only as named fields (:data:`PARAMS`, :data:`LEARNED`,
:data:`ARRAYS`); ``NeuronIndex.save``/``load`` map them to and from its attributes, so
the two modules do not import each other.

The file holds five arrays and a JSON ``meta`` string. It is written to a
temporary file and renamed (a crash never leaves half an index) and read with
``allow_pickle=False``: nothing in it is ever unpickled. An index file may be
truncated, corrupt, from another version or tampered with; reading it therefore
checks everything before the index answers a query, because a wrong index gives
wrong answers, not errors:

* ``meta`` is a JSON object with exactly the allow-listed fields (each of its
  type) — never ``setattr`` of whatever keys a file holds;
* the arrays have the dtypes and shapes the fields imply, record ids in range;
* a SHA-256 over ``meta`` and the arrays matches (bit rot, a partial copy).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ..errors import DNIError

#: Version of the file layout; 2 added the model's weights hash and the checksum.
FORMAT = 2

#: Constructor parameters and fitted attributes in ``meta``, with their types.
PARAMS: dict[str, tuple[type, ...]] = {
    "layer": (str, int),
    "ratio": (int, float),
    "n_partitions": (int,),
    "symbol_agg": (str,),
    "batch_size": (int,),
}
LEARNED: dict[str, tuple[type, ...]] = {
    "n_records_": (int,),
    "width_": (int,),
    "n_partitions_": (int,),
    "bits_": (int,),
    "address_": (str,),
    "model_name_": (str,),
    "digest_": (str,),
    "weights_sha256_": (str,),
}
ARRAYS = ("mai_ids_", "mai_values_", "lower_", "upper_", "partitions_")


def _checksum(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    for name in ARRAYS:
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def save_index(fields: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write an index's ``fields`` (every name of PARAMS, LEARNED and ARRAYS) to ``path``
    atomically (see the module docstring)."""
    path = Path(path)
    if not path.parent.is_dir():  # else the error would name the temporary file
        raise FileNotFoundError(f"cannot save the index to {str(path)!r}: no directory there.")
    arrays = {k: fields[k] for k in ARRAYS}
    meta = {"format": FORMAT, **{k: fields[k] for k in (*PARAMS, *LEARNED)}}
    meta["sha256"] = _checksum(meta, arrays)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_index(path: str | os.PathLike) -> dict[str, Any]:
    """Read and check an index file: its fields (PARAMS, LEARNED and ARRAYS, nothing else).

    Every problem is a DNIError naming ``path`` and the fix.
    """
    with open(path, "rb") as f:  # np.load would take any other file for a pickle
        if f.read(4) != b"PK\x03\x04":
            _fail(path, "is not an .npz archive", corrupt=True)
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            raw = z["meta"] if "meta" in files else None
            arrays = {k: z[k] for k in ARRAYS if k in files}
    except ValueError as exc:
        if "pickle" in str(exc).lower():  # numpy refuses an object array: pickled data
            _fail(path, "holds pickled data, which is never loaded")
        _fail(path, f"cannot be read ({exc})", corrupt=True)
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, KeyError) as exc:
        _fail(path, f"cannot be read ({type(exc).__name__}: {exc})", corrupt=True)
    if raw is None or raw.dtype.kind != "U" or raw.ndim != 0:
        _fail(path, "has no JSON 'meta' string: it is not a NeuronIndex file")
    try:
        meta = json.loads(str(raw))
    except ValueError:
        _fail(path, "has a 'meta' that is not valid JSON", corrupt=True)
    if not isinstance(meta, dict):
        _fail(path, "has a 'meta' that is not a JSON object", corrupt=True)
    if meta.get("format") != FORMAT:
        _fail(path, f"holds index format {meta.get('format')!r}; this dni_lab reads {FORMAT}")
    _check_fields(path, meta, files)
    _check_arrays(path, meta, arrays)
    stored = meta.pop("sha256")
    if _checksum(meta, arrays) != stored:
        _fail(path, "does not match its checksum", corrupt=True)
    # allow-listed names only, checked above
    return {k: arrays[k] if k in arrays else meta[k] for k in (*PARAMS, *LEARNED, *ARRAYS)}


def _fail(path: Any, problem: str, corrupt: bool = False) -> NoReturn:
    why = " (truncated or corrupt)" if corrupt else ""
    raise DNIError(
        f"index file {str(path)!r} {problem}{why}; re-fit the index "
        "(NeuronIndex(layer).fit(model, records)) and save it again."
    )


def _check_fields(path: Any, meta: dict[str, Any], files: set[str]) -> None:
    allowed = {"format", "sha256", *PARAMS, *LEARNED}
    unknown = sorted(set(meta) - allowed)
    if unknown:
        _fail(path, f"has unknown meta fields {unknown}")
    missing = sorted(allowed - set(meta)) + sorted(set(ARRAYS) - files)
    if missing:
        _fail(path, f"lacks {missing}", corrupt=True)
    extra = sorted(files - {"meta", *ARRAYS})
    if extra:
        _fail(path, f"has unknown arrays {extra}")
    for name, types in {**PARAMS, **LEARNED, "sha256": (str,)}.items():
        value = meta[name]
        if isinstance(value, bool) or not isinstance(value, types):
            kinds = " or ".join(t.__name__ for t in types)
            _fail(path, f"has meta field {name!r} = {value!r}, not {kinds}")
    if min(meta["n_records_"], meta["width_"], meta["n_partitions_"], meta["bits_"]) < 0:
        _fail(path, "has a negative count in its meta fields")


def _check_arrays(path: Any, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Dtypes and shapes the fields imply, and record ids within the dataset."""
    N, D, P, bits = meta["n_records_"], meta["width_"], meta["n_partitions_"], meta["bits_"]
    m = arrays["mai_ids_"].shape[-1] if arrays["mai_ids_"].ndim == 2 else -1
    expected = {
        "mai_ids_": (np.int32, (D, m)),
        "mai_values_": (np.float32, (D, m)),
        "lower_": (np.float32, (D, P)),
        "upper_": (np.float32, (D, P)),
        "partitions_": (np.uint8, (D, math.ceil(N * bits / 8)) if D else (0, 0)),
    }
    for name, (dtype, shape) in expected.items():
        a = arrays[name]
        if a.dtype != dtype or a.shape != shape:
            _fail(
                path,
                f"has array {name} of {a.dtype}{a.shape}, expected {np.dtype(dtype)}{shape}",
                corrupt=True,
            )
    if not 0 <= m <= N or bits != max(1, math.ceil(math.log2(max(P, 1)))):
        _fail(path, "has meta fields that disagree with its arrays", corrupt=True)
    ids = arrays["mai_ids_"]
    if ids.size and (ids.min() < 0 or ids.max() >= N):
        _fail(path, f"has record ids outside 0..{N - 1}", corrupt=True)
