"""Latent explanations written elsewhere (Neuronpedia, delphi), read into one frame.

:func:`read_explanations` returns a Polars frame with one row per explanation:
``latent`` (Int64), ``explanation`` (String), ``source`` (``"neuronpedia"`` or
``"delphi"``), ``layer`` (the export's SAE or module name, or null), ``explainer`` (the
model that wrote it, or null) and ``score`` (Float64, null unless the export has one).
A latent with several explanations (several explainer models) has several rows.

Shapes read (field names as the two tools write them):

* **Neuronpedia** (``/api/explanation/export``, the bulk ``explanations/*.jsonl.gz``
  files): a JSON list of objects (or JSON lines, gzipped or not), each with the latent
  in ``index`` (an int or a numeric string; ``feature`` or ``latent`` are accepted too)
  and the text in ``description`` (or ``explanation``); ``layer`` (e.g.
  ``"6-res-jb"``), ``explanationModelName`` and a numeric ``score`` are kept when
  present. A feature object (``/api/feature``) with an ``explanations`` list under its
  ``index`` gives one row per explanation; ``{"explanations": [...]}`` is read as the list.
* **delphi** (EleutherAI): one file per latent in the run's ``explanations/`` directory,
  named ``{module}_latent{index}.txt`` (``layers.6_latent123.txt``) and holding the
  explanation as a JSON string. A path may be that directory, the run directory above
  it, one such file, or a JSON object ``{"layers.6_latent123": text, ...}`` (a value
  may also be an object with ``"explanation"`` and, optionally, ``"score"``).

Anything else is a :class:`~dni_lab.backend.errors.DNIError` naming the file and the
entry.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from ..backend.errors import DNIError

SCHEMA = {
    "latent": pl.Int64(),
    "explanation": pl.String(),
    "source": pl.String(),
    "layer": pl.String(),
    "explainer": pl.String(),
    "score": pl.Float64(),
}
FORMATS = ("neuronpedia", "delphi", "auto")
_DELPHI_NAME = re.compile(r"^(?P<module>.+)_latent(?P<index>\d+)$")


def read_explanations(path_or_obj: Any, format: str = "auto") -> pl.DataFrame:
    """Read latent explanations exported by Neuronpedia or delphi.

    Parameters
    ----------
    path_or_obj : str, Path, list or dict
        A file or directory (see the module docstring for the shapes), or the already
        parsed JSON (a list of Neuronpedia objects, a delphi ``{name: text}`` mapping).
    format : {"auto", "neuronpedia", "delphi"}
        ``"auto"``: a directory or ``.txt`` file is delphi, a list is Neuronpedia, an
        object is delphi when its keys are ``{module}_latent{index}`` names.

    Returns
    -------
    pl.DataFrame
        ``latent, explanation, source, layer, explainer, score``.
    """
    if format not in FORMATS:
        raise DNIError(f"format={format!r}: use one of {FORMATS}.")
    where = "the given object"
    obj = path_or_obj
    if isinstance(path_or_obj, (str, Path)):
        path = Path(path_or_obj)
        where = str(path)
        if not path.exists():
            raise DNIError(f"no explanation export at {where}; pass an existing file or directory.")
        if path.is_dir():
            if format == "neuronpedia":
                raise DNIError(f"{where} is a directory; a Neuronpedia export is one JSON file.")
            return _frame(_delphi_dir(path))
        if path.suffix == ".txt" and format != "neuronpedia":
            return _frame([_delphi_file(path)])
        obj = _load_json(path)
    if format == "auto":
        format = _guess(obj, where)
    rows = _neuronpedia(obj, where) if format == "neuronpedia" else _delphi_obj(obj, where)
    return _frame(rows)


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SCHEMA) if rows else pl.DataFrame(schema=SCHEMA)


def _load_json(path: Path) -> Any:
    """A JSON document, or the list of a JSON-lines file (gzipped or not)."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as first:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        out = []
        for i, line in enumerate(lines):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                if i == 0:  # not JSON lines either: report the document's own error
                    raise DNIError(f"{path} is not valid JSON: {first}.") from None
                raise DNIError(f"{path}, line {i + 1}: not valid JSON: {line[:80]!r}.") from None
        return out


def _guess(obj: Any, where: str) -> str:
    if isinstance(obj, list):
        return "neuronpedia"
    if isinstance(obj, Mapping):
        if "explanations" in obj or "index" in obj:
            return "neuronpedia"
        if obj and all(_DELPHI_NAME.match(str(k)) for k in obj):
            return "delphi"
    raise DNIError(
        f"cannot tell the format of {where}: expected a Neuronpedia list of objects with "
        "'index' and 'description', or a delphi mapping of '{module}_latent{index}' names; "
        "pass format='neuronpedia' or format='delphi'."
    )


def _index(value: Any, where: str, entry: str) -> int:
    if isinstance(value, bool) or value is None:
        raise DNIError(f"{where}, {entry}: latent index {value!r} is not an integer.")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise DNIError(f"{where}, {entry}: latent index {value!r} is not an integer.")


def _score(value: Any, where: str, entry: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DNIError(f"{where}, {entry}: score {value!r} is not a number; drop it or fix it.")
    return float(value)


def _text(value: Any, where: str, entry: str) -> str:
    if not isinstance(value, str):
        raise DNIError(
            f"{where}, {entry}: the explanation is {type(value).__name__} {value!r}, not a string."
        )
    return value


def _neuronpedia(obj: Any, where: str) -> list[dict[str, Any]]:
    if (
        isinstance(obj, Mapping)
        and isinstance(obj.get("explanations"), list)
        and "index" not in obj
    ):
        obj = obj["explanations"]
    if isinstance(obj, Mapping):
        obj = [obj]
    if not isinstance(obj, list):
        raise DNIError(f"{where}: a Neuronpedia export is a JSON list, not {type(obj).__name__}.")
    rows = []
    for i, item in enumerate(obj):
        entry = f"entry {i}"
        if not isinstance(item, Mapping):
            raise DNIError(f"{where}, {entry}: expected an object, got {item!r:.80}.")
        key = next((k for k in ("index", "feature", "latent") if k in item), None)
        if key is None:
            raise DNIError(
                f"{where}, {entry}: no latent index; Neuronpedia entries carry it in 'index' "
                f"(keys here: {sorted(item)})."
            )
        latent = _index(item[key], where, entry)
        inner = item.get("explanations")
        if isinstance(inner, list):  # a feature object: its explanations, one row each
            for j, sub in enumerate(inner):
                if not isinstance(sub, Mapping):
                    raise DNIError(f"{where}, {entry}, explanation {j}: expected an object.")
                rows.append(_np_row(latent, {**item, **sub}, where, f"{entry}, explanation {j}"))
        else:
            rows.append(_np_row(latent, item, where, entry))
    return rows


def _np_row(latent: int, item: Mapping[str, Any], where: str, entry: str) -> dict[str, Any]:
    key = next((k for k in ("description", "explanation") if k in item), None)
    if key is None:
        raise DNIError(
            f"{where}, {entry}: no explanation text; Neuronpedia entries carry it in "
            f"'description' (keys here: {sorted(item)})."
        )
    layer = item.get("layer")
    return {
        "latent": latent,
        "explanation": _text(item[key], where, entry),
        "source": "neuronpedia",
        "layer": None if layer is None else str(layer),
        "explainer": item.get("explanationModelName"),
        "score": _score(item.get("score"), where, entry),
    }


def _delphi_row(name: str, value: Any, where: str) -> dict[str, Any]:
    m = _DELPHI_NAME.match(name)
    if m is None:
        raise DNIError(
            f"{where}, entry {name!r}: delphi names latents '{{module}}_latent{{index}}' "
            "(e.g. 'layers.6_latent123')."
        )
    score = None
    if isinstance(value, Mapping):
        if "explanation" not in value:
            raise DNIError(f"{where}, entry {name!r}: an object needs an 'explanation' field.")
        score = _score(value.get("score"), where, f"entry {name!r}")
        value = value["explanation"]
    return {
        "latent": int(m["index"]),
        "explanation": _text(value, where, f"entry {name!r}"),
        "source": "delphi",
        "layer": m["module"],
        "explainer": None,
        "score": score,
    }


def _delphi_obj(obj: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(obj, Mapping):
        raise DNIError(
            f"{where}: delphi explanations read as a JSON object {{'layers.6_latent123': text}}, "
            f"not {type(obj).__name__}."
        )
    return [_delphi_row(str(k), v, where) for k, v in obj.items()]


def _delphi_file(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise DNIError(
            f"{path}: delphi writes each explanation as a JSON string; this file holds "
            f"{text[:60]!r}."
        ) from None
    return _delphi_row(path.stem, value, str(path))


def _delphi_dir(path: Path) -> list[dict[str, Any]]:
    if not any(path.glob("*.txt")) and (path / "explanations").is_dir():
        path = path / "explanations"  # a run directory: its explanations
    files = sorted(path.glob("*.txt"))
    if not files:
        raise DNIError(
            f"{path} holds no delphi explanation files ('{{module}}_latent{{index}}.txt')."
        )
    return [_delphi_file(f) for f in files]
