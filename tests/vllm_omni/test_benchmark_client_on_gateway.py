"""vLLM-Omni's own benchmark client (`vllm bench serve --omni`, its `/v1/videos` backend, from the vLLM-Omni venv)
against the studio's gateway: a studio on its embedded engine with an API key. Every request succeeds, and each is a
video of the key's user in the studio's History, as one sent from the page would be."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

from studio.gateway.keys import add_key
from tests.conftest import WAN_DIR
from tests.studio_process import start_studio, stop_studio
from tests.vllm_omni.conftest import VLLM

PROMPTS = [f"a {color} circle moving right on a white background" for color in ("red", "blue", "green", "yellow")]
BENCH_TIMEOUT_S = 300


def test_vllm_omnis_benchmark_client_runs_against_the_gateway(tmp_path):
    key = add_key(tmp_path / "keys.txt", "bench")
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": prompt}) + "\n" for prompt in PROMPTS))
    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log", "--api-key-file", str(tmp_path / "keys.txt"))
    try:
        command = [
            VLLM,
            "bench",
            "serve",
            "--omni",
            "--backend",
            "/v1/videos",
            "--endpoint",
            "/v1/videos",
            "--base-url",
            studio.url,
            "--model",
            "omni-small-t2v",
            # The client counts prompt tokens with a tokenizer: the tiny Wan's, on disk.
            "--tokenizer",
            str(WAN_DIR / "tokenizer"),
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(dataset),
            "--skip-chat-template",
            "--num-prompts",
            str(len(PROMPTS)),
            "--max-concurrency",
            "2",
            "--extra-body",
            json.dumps({"size": "256x256", "num_frames": 5, "num_inference_steps": 2, "poll_interval_s": 0.2}),
            "--save-result",
            "--result-dir",
            str(tmp_path),
            "--result-filename",
            "bench.json",
        ]
        env = {**os.environ, "OPENAI_API_KEY": key, "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    finally:
        stop_studio(studio)
    said = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, said
    result = json.loads((tmp_path / "bench.json").read_text())
    assert (result["completed"], result["failed"]) == (len(PROMPTS), 0), said
    assert result["total_video_frames"] == 5 * len(PROMPTS)

    with sqlite3.connect(Path(studio.outputs) / "history.sqlite3") as db:
        rows = db.execute(
            "SELECT r.visitor, q.prompt, q.state FROM requests q JOIN runs r ON r.id = q.run_id"
        ).fetchall()
    assert sorted(prompt for _, prompt, _ in rows) == sorted(PROMPTS)
    assert {(visitor, state) for visitor, _, state in rows} == {("user:bench", "done")}
