"""A short run of the soak (benchmarks/cpu/soak.py): a studio with sign-in on the embedded engine, three visitors and an
operator through the page's API, an engine restart and a sharing change on the way. Its report says every request
is accounted for, memory and open files do not grow past the bound, and neither log holds a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MINUTES = 4
# The crowd's minutes, the studio's start and warm-up, the last runs' drain and the report, with room to spare.
TIMEOUT_S = MINUTES * 60 + 600


@pytest.mark.long
@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("minutes", [MINUTES])
def test_a_short_soak_accounts_for_every_request(tmp_path, minutes):
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "cpu" / "soak.py"),
        "--minutes",
        str(minutes),
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S - 30)
    said = f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    report_path = tmp_path / "report.json"
    assert report_path.exists(), f"no report (exit {done.returncode}):\n{said}"
    report = json.loads(report_path.read_text())
    checks = report["checks"]
    accounting = report["accounting"]
    assert checks["accounted"]["ok"], f"{accounting['problems'][:10]}\n{said}"
    assert accounting["requests"] > 0 and set(accounting["states"]) <= {"done", "failed", "cancelled"}
    assert accounting["states"].get("done", 0) > 0
    assert checks["memory_growth"]["ok"], f"{checks['memory_growth']}\n{said}"
    assert checks["open_files_growth"]["ok"], f"{checks['open_files_growth']}\n{said}"
    assert checks["no_traceback"]["ok"], f"{checks['no_traceback']}\n{said}"
    # The operator's restart and sharing change happened (else the run proves less than it says).
    assert checks["operator"]["ok"], f"{checks['operator']}\n{said}"
    assert len(report["per_minute"]) == minutes and (tmp_path / "memory.png").stat().st_size > 0
