"""The Gradio app for Hugging Face Spaces (app_file): `python studio/app.py` serves it, importing gives `demo`.

`omni-studio ui` is the usual way in; this module builds the same page from settings (env, .env), completed for
the Space it runs on (studio/hosting.py): the address and port the Space gives, its persistent storage, and
sharing limits sized for its hardware.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script (a Space runs `python studio/app.py` on requirements.txt, without installing the project):
    # make the package importable here and in the engine process the studio starts (`python -m studio.engine`).
    _root = str(Path(__file__).resolve().parent.parent)
    sys.path[0] = _root  # in place of studio/ itself, whose module names would shadow others
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_root, os.environ.get("PYTHONPATH")]))

from studio.backend.controller import StudioController
from studio.config import StudioSettings
from studio.hosting import HostedStudio, hosted_settings
from studio.startup import private_files
from studio.ui.page import build_page, enable_queue


def build_app(settings: StudioSettings | None = None):
    controller = StudioController(settings or StudioSettings())
    return enable_queue(build_page(controller))


def announce(hosted: HostedStudio) -> None:
    """What the Space's log should say: where it serves, where results are kept (or that they are not), who may do
    what."""
    for note in hosted.notes:
        print(f"Omni Studio: {note}", flush=True)


# Served or imported, this module makes the studio: its outputs are 0600 in 0700 folders, the engine's files too.
private_files()

if __name__ == "__main__":
    from studio.cli import exit_on_sigterm
    from studio.ui.launch import launch_ui

    exit_on_sigterm()  # a Space stops the app with SIGTERM: its engine is stopped with it

    hosted = hosted_settings()
    announce(hosted)
    raise SystemExit(launch_ui(hosted.settings))
else:
    _hosted = hosted_settings()
    announce(_hosted)
    demo = build_app(_hosted.settings)
