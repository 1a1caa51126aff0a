"""Layouts: how a module's output maps onto (records, symbols, units), declared or unambiguous.

:mod:`.spec` holds :class:`Layout` (one letter per axis, reading a view and writing
forced values back into the same axes); :mod:`.kinds` the layouts that module kinds
fix; :mod:`.infer` the rules that give every other address a layout or an error that
lists its readings; :mod:`.proof` the second probe that proves what those rules leave
open (the axis that moves with the records, the one that moves with their length) and
the one question that asks what it cannot prove; :mod:`.outputs` which tensor of a
structured output (tuple, dict, dataclass, ``ModelOutput``) a layer reads.
"""

from .frames import Frames
from .hook_points import hook_point_layout
from .infer import Inferred, Seen, first_input, infer_layouts
from .kinds import kind_layout, readings
from .outputs import describe as describe_output
from .spec import Layout, as_layout, first_tensor

__all__ = [
    "Frames",
    "Inferred",
    "Layout",
    "Seen",
    "as_layout",
    "describe_output",
    "first_input",
    "first_tensor",
    "hook_point_layout",
    "infer_layouts",
    "kind_layout",
    "readings",
]
