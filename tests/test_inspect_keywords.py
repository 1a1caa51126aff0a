"""What the notebook extension highlights in ``%%inspect`` cells comes from the parser and
the magic (issue 36, §6): ``labextension/lib/keywords.js`` is generated from them
(``labextension/keywords.py``) and the committed build holds it. The colours themselves
are checked in the browser (``tests/e2e/test_inspect_highlight.py``).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from dni_lab.backend.query.parser import KEYWORDS, parse
from dni_lab.magic import split_options

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("keywords", REPO / "labextension" / "keywords.py")
keywords = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keywords)
GENERATED = (REPO / "labextension" / "lib" / "keywords.js").read_text(encoding="utf-8")


def exported(name: str) -> list[str]:
    return re.search(rf'export const {name} = "([^"]*)";', GENERATED).group(1).split()


def test_the_extension_s_keywords_are_generated_from_the_parser():
    assert GENERATED == keywords.source(), "stale: run labextension/keywords.py and rebuild"
    assert set(exported("KEYWORDS")) == {w.lower() for w in KEYWORDS}
    assert {"inspect", "using", "over", "fdr", "select", "nulls"} <= set(exported("KEYWORDS"))


def test_the_parser_reads_dni_lab_s_own_words_as_keywords():
    q = parse("SELECT S.uid INSPECT U.uid AND H.h USING corr OVER D.seq AS S "
              "FROM units U, hypotheses H, inputs D WITH FDR 0.05")
    assert q.inspect.inputs.alias == "D" and q.inspect.alias == "S"
    assert q.options["fdr"][0] == 0.05


def test_the_valued_options_are_the_magic_s():
    for option in exported("VALUED_OPTIONS"):
        assert split_options(f"{option} x SELECT 1") == (f"{option} x", "SELECT 1"), option
    assert split_options("--no-live SELECT 1") == ("--no-live", "SELECT 1")  # takes no value


def test_the_committed_build_holds_the_keywords():
    built = REPO / "dni_lab" / "labextension"
    entry = json.loads((built / "package.json").read_text())["jupyterlab"]["_build"]["load"]
    assert (built / entry).is_file()
    bundle = "".join(p.read_text(encoding="utf-8") for p in (built / "static").glob("*.js"))
    stale = "rebuild the extension (labextension/README.md)"
    assert " ".join(exported("KEYWORDS")) in bundle, stale
    assert " ".join(exported("VALUED_OPTIONS")) in bundle
