"""The Gradio app as a module-level `demo`, for Hugging Face Spaces (app_file) and `gradio` reload.

`omni-studio ui` is the usual way in; this module builds the same page from settings (env, .env).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script (Spaces runs `python studio/app.py`): make the package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from studio.backend.controller import StudioController
from studio.config import StudioSettings
from studio.ui.page import build_page, enable_queue


def build_app(settings: StudioSettings | None = None):
    controller = StudioController(settings or StudioSettings())
    return enable_queue(build_page(controller))


if __name__ == "__main__":
    from studio.ui.launch import launch_ui

    raise SystemExit(launch_ui(StudioSettings()))
else:
    demo = build_app()
