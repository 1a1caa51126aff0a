"""The patching-grid heatmap is exported like every chart: a lazy ``dl.widgets`` name and a
``Plot`` kind (issue 49)."""

from __future__ import annotations

import importlib


def test_patch_grid_chart_is_a_lazy_public_name_and_a_plot_kind():
    widgets = importlib.import_module("dni_lab.widgets")
    home = importlib.import_module("dni_lab.widgets._patch_grid")
    assert "patch_grid_chart" in widgets.__all__ and "patch_grid_chart" in dir(widgets)
    assert widgets.patch_grid_chart is home.patch_grid_chart
    plots = importlib.import_module("dni_lab.widgets.plots")
    assert plots.KINDS["patch_grid"] is home.patch_grid_chart
