"""Browser tests: marked ``e2e`` (run with ``pytest -m e2e``; deselect with ``-m 'not e2e'``)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: end-to-end tests in JupyterLab through Chromium")
