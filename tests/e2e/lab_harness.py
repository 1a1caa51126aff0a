"""Start a private JupyterLab and drive Debian's Chromium through Playwright.

JupyterLab runs as a child process on 127.0.0.1 with a random token, a free port
and every Jupyter directory inside a temporary folder, so a test neither reads
nor writes the user's settings and reaches nothing outside this machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
# every browser test module: ``pytestmark = E2E``
E2E = [
    pytest.mark.e2e,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed"),
]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A free port in DNI_LAB_E2E_PORTS (``lo-hi``, e.g. ``18800-18899`` where a shared machine
    hands out ranges), else any free port."""
    lo, _, hi = os.environ.get("DNI_LAB_E2E_PORTS", "").partition("-")
    candidates = range(int(lo), int(hi) + 1) if lo and hi else [0]
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port in DNI_LAB_E2E_PORTS={os.environ['DNI_LAB_E2E_PORTS']}")


def write_notebook(path: Path, cells: Sequence[str]) -> Path:
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{i}",
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb, indent=1))
    return path


@contextlib.contextmanager
def jupyter_lab(
    root: Path, timeout: float = 90.0, app: str = "jupyterlab", app_settings: Path | None = None
) -> Iterator[str]:
    """Run JupyterLab (or ``app="notebook"``: Notebook 7) on ``root``; yields
    ``"http://127.0.0.1:PORT|TOKEN"`` (with ``|notebook`` appended for Notebook 7).
    ``app_settings``: the application settings directory (its ``overrides.d``), in place of
    the environment's ``share/jupyter/lab/settings``."""
    port, token = free_port(), secrets.token_hex(16)
    home = root / ".jupyter-home"
    for d in ("config", "data", "runtime", "settings", "workspaces"):
        (home / d).mkdir(parents=True, exist_ok=True)
    # no "official Jupyter news?" prompt over the page (and no fetch of the news feed)
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True, exist_ok=True)
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_TOKEN": token,
    }
    cls = "LabApp" if app == "jupyterlab" else "JupyterNotebookApp"
    cmd = [
        sys.executable,
        "-m",
        app,
        "--allow-root",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        f"--{cls}.user_settings_dir={home / 'settings'}",
        f"--{cls}.workspaces_dir={home / 'workspaces'}",
    ]
    if app == "jupyterlab":
        cmd.append("--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")
    if app_settings is not None:  # Notebook 7 reads its settings through JupyterLab's too
        cmd += [f"--{c}.app_settings_dir={app_settings}" for c in sorted({cls, "LabApp"})]
    log = open(root / "jupyterlab.log", "w")  # closed in the finally below
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited: {(root / 'jupyterlab.log').read_text()}")
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("JupyterLab did not start in time") from None
                time.sleep(0.5)
        yield f"{base}|{token}" + ("" if app == "jupyterlab" else "|notebook")
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@contextlib.contextmanager
def chromium_page(viewport: tuple[int, int] = (1500, 1000)) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            yield page
        finally:
            browser.close()


def open_notebook(page: Any, server: str, name: str, reset: bool = False) -> None:
    """Open notebook ``name``; ``reset``: in JupyterLab, without the tabs open before."""
    base, token, *app = server.split("|")
    path = "notebooks" if app == ["notebook"] else "lab/tree"
    query = "&reset" if reset and app != ["notebook"] else ""
    page.goto(f"{base}/{path}/{name}?token={token}{query}", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # the kernel is ready when the status shows Idle
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    accept_dialogs(page)


def accept_dialogs(page: Any) -> None:
    """Accept a dialog JupyterLab sometimes raises on open (e.g. "Select Kernel", with the
    notebook's own kernel preselected): a person would press its default button."""
    button = page.locator(".jp-Dialog .jp-mod-accept")
    if button.count() and button.first.is_visible():
        button.first.click()
        page.wait_for_selector(".jp-Dialog", state="detached", timeout=10_000)


def run_cell(page: Any, index: int, tries: int = 3) -> None:
    """Run cell ``index`` as a person would: click into it, Shift+Enter; then wait until
    its prompt shows it queued or ran (a key press before the editor is ready is lost)."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    prompt = cell.locator(".jp-InputArea-prompt")
    for _ in range(tries):
        accept_dialogs(page)
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Shift+Enter")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if re.search(r"\[(\*|\d+)\]", prompt.inner_text()):
                return
            time.sleep(0.1)
    raise AssertionError(f"cell {index} did not start: prompt {prompt.inner_text()!r}")


def wait_idle(page: Any, timeout: float = 60.0) -> None:
    page.wait_for_selector(
        ".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=timeout * 1000
    )


def cell_output(page: Any, index: int) -> str:
    return page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea").inner_text()


def wait_output(page: Any, index: int, needle: str, timeout: float = 30.0) -> None:
    """Until cell ``index``'s output contains ``needle``."""
    deadline = time.monotonic() + timeout
    while needle not in cell_output(page, index):
        if time.monotonic() > deadline:
            raise AssertionError(f"cell {index}: no {needle!r} in {cell_output(page, index)!r}")
        time.sleep(0.2)
