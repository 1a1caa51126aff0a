"""Verification of DNI findings: ``dl.verify.perturbation(...)`` and friends.

A high score is not yet a finding: DNI mines many (unit, hypothesis) pairs and
yields false positives (DeepBase §4.4). Each check here compares the units
under test with random unit sets of the same size, or the scores with a null:

* :func:`perturbation` — baseline vs treatment symbol swaps, silhouette of the
  units' activation changes (DeepBase §4.4, §6.1);
* :func:`ablation`, :func:`oracle` — remove the top-k units, or force them to the
  hypothesis pattern, and measure task accuracy (DNI workshop paper §5.2);
* :func:`patching` — write a unit set's (or heads') values from clean records into
  corrupted ones and measure a metric (a logit difference), against random sets;
* :func:`attribution_patching` — every unit's (head's) patching effect at once, from
  the gradient of the metric (:class:`MetricGradients`), optionally against exact patching;
* :func:`patch_grid`, :func:`attribution_grid` — TransformerLens-style patching grids
  (layer × position, layer × head) in one call, each with a null grid, and their
  gradient estimate checked against the exact grid;
* :func:`generative` — force units while sampling and count how often the
  hypothesis fires in the output (Luigi, DNI paper);
* :func:`permutation_test`, :func:`bh_qvalues`, :func:`with_qvalues`,
  :func:`untrained_baseline`, :func:`selectivity` — significance and controls.

The checks live in this package's modules (perturb, ablate, force, generate,
patching, patch_grid, attribution_grid, grid_sites, grid_replay, attribution, gradients,
controls, stats, rules, common); this module is their public face.
"""

from __future__ import annotations

from .ablate import ablation, next_symbol_accuracy, oracle
from .attribution import attribution_patching
from .attribution_grid import attribution_grid
from .common import RandomSetOptions, Verification, random_unit_sets
from .controls import (
    ControlTask,
    control_task,
    selectivity,
    untrained_baseline,
    untrained_copy,
)
from .force import force_units
from .generate import generative
from .gradients import GradientOf, MetricGradients
from .patch_grid import patch_grid
from .patching import logit_difference, patching
from .perturb import perturbation, silhouette_score
from .rules import (
    CHAR_CLASSES,
    WORD_CLASSES,
    RecordRules,
    SwapRules,
    candidates,
    char_classes,
    grammar_terminals,
    word_classes,
)
from .stats import bh_qvalues, permutation_test, with_qvalues

__all__ = [
    "CHAR_CLASSES",
    "WORD_CLASSES",
    "ControlTask",
    "GradientOf",
    "MetricGradients",
    "RandomSetOptions",
    "RecordRules",
    "SwapRules",
    "Verification",
    "ablation",
    "attribution_grid",
    "attribution_patching",
    "bh_qvalues",
    "candidates",
    "char_classes",
    "control_task",
    "force_units",
    "generative",
    "grammar_terminals",
    "logit_difference",
    "next_symbol_accuracy",
    "oracle",
    "patch_grid",
    "patching",
    "permutation_test",
    "perturbation",
    "random_unit_sets",
    "selectivity",
    "silhouette_score",
    "untrained_baseline",
    "untrained_copy",
    "with_qvalues",
    "word_classes",
]
