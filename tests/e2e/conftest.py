"""Browser tests: marked ``e2e`` (run with ``pytest -m e2e``; deselect with ``-m 'not e2e'``)."""

import os
from pathlib import Path

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: end-to-end tests in JupyterLab through Chromium")


@pytest.fixture
def shots(tmp_path):
    """Where the tests' screenshots go: ``$DNI_LAB_SCREENSHOTS`` (the repository's are made
    with ``DNI_LAB_SCREENSHOTS=docs/screenshots``), else the test's temporary folder."""
    d = Path(os.environ.get("DNI_LAB_SCREENSHOTS") or tmp_path / "screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d
