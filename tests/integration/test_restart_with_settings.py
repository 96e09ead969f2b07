"""An operator restarts the engine with new settings while a visitor's run waits: the new fleet's servers are new
processes on new ports, and the requests not yet sent go to them, not to the old address until its wait runs out."""

from __future__ import annotations

import time

from gradio_client import Client

from tests.browser.conftest import start_studio, stop_studio
from tests.waiting import log_tail, wait_for


def test_requests_waiting_at_a_restart_with_new_settings_go_to_the_new_engine(tmp_path):
    log = tmp_path / "studio.log"
    studio = start_studio(tmp_path / "outputs", log, "--server-wait", "90")
    try:
        client = Client(studio.url, verbose=False)
        queued = client.predict(
            prompts="a red circle moving left on a white background",
            tier="256p",
            frames=33,
            steps=12,
            copies=5,
            concurrency=1,
            api_name="/submit_run",
        )
        run_id = queued["run_id"]

        def status() -> dict:
            return client.predict(run_id=run_id, api_name="/run_status")

        wait_for(
            lambda: status()["states"].get("done", 0) >= 1, "the run's first video", 120, detail=lambda: log_tail(log)
        )
        api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/restart_server"]
        blanks = {p["parameter_name"]: None for p in api["parameters"] if not p.get("parameter_has_default")}
        restarted_at = time.monotonic()
        answer = client.predict(**blanks, api_name="/restart_server")
        assert str(answer).startswith("started"), answer
        record = wait_for(
            lambda: (now := status())["finished"] and now, "the run to finish", 240, detail=lambda: log_tail(log)
        )
        errors = [item["error"] for item in record["requests"] if item["state"] != "done"]
        # The request at the old engine when it stopped may fail with that reason; none waits out the old address.
        assert record["states"].get("done", 0) >= 4, record["states"]
        assert not [e for e in errors if e and "none came back" in e], errors
        assert time.monotonic() - restarted_at < 90, "the requests waited for the old engine's address"
    finally:
        stop_studio(studio)
