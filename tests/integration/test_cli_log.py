"""`omni-studio generate` in a studio's outputs folder: its engine writes its log in a folder of its own, and the
studio's engine log (the one the Server tab shows) is left as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import MODEL_DIR


def test_generate_keeps_its_engine_log_apart_from_the_studios(tmp_path: Path):
    studios_log = tmp_path / "logs" / "embedded-server.log"
    studios_log.parent.mkdir(parents=True)
    studios_log.write_text("the studio's engine, ready\n")
    quick = ("--tier", "256p", "--aspect", "1:1", "--frames", "5", "--steps", "2", "--seed", "1")
    where = ("--model", str(MODEL_DIR), "--out", str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "studio", "generate", "a red circle", *quick, *where],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip().splitlines()[-1]).is_file()
    assert studios_log.read_text() == "the studio's engine, ready\n"
    own = tmp_path / "logs" / "generate" / "embedded-server.log"
    assert own.is_file() and own.stat().st_size > 0
    assert sorted(path.name for path in (tmp_path / "logs").iterdir()) == ["embedded-server.log", "generate"]
