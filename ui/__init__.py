"""The visualiser's user interface (Gradio): the only code that imports gradio.

``build_demo()`` lays out the app, ``launch_options()`` gives the matching ``launch()``
arguments. Shared state lives in ``state``, the error policy in ``errors``, input coercion in
``inputs``, request limits in ``limits``, and each tab in its own module under ``tabs/``.
"""

from .demo import build_demo, launch_options, preload_models

__all__ = ["build_demo", "launch_options", "preload_models"]
