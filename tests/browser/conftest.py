"""Fixtures of the browser tests (defined in ``_ui_env.py``, which the tests import by that unique name)."""

from __future__ import annotations

from _ui_env import ui_server as ui_server  # noqa: F401 - the fixture
