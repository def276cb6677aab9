"""The system tier's fixtures: the browser modules share one Chromium and one app
(``browsers.py``)."""

from browsers import app, app_url, browser, page, screenshots  # noqa: F401  (fixtures, by name)
