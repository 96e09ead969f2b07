"""Exposure rules and the share link's failure, with the real `omni-studio ui` process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from studio.backend.servers.supervisor import free_port
from tests.waiting import wait_for


@pytest.mark.parametrize("flags", [["--share"], ["--host", "0.0.0.0"]])
def test_public_binding_needs_auth(flags, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "studio", "ui", *flags, "--port", str(free_port()), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "add accounts with --auth user:pass (or --auth-file)" in result.stderr
    assert "--allow-anonymous" in result.stderr and "--insecure" in result.stderr


def test_share_without_a_tunnel_says_so_and_keeps_serving(tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "studio",
            "ui",
            "--share",
            "--auth",
            "user:secret-pass",
            "--port",
            str(port),
            "--out",
            str(tmp_path / "outputs"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        lines = []

        def share_line_or_end() -> bool:
            """One more line of the server's output (readline blocks until it comes): whether it is the share
            link's failure, or the output has ended."""
            line = process.stdout.readline()
            if not line:
                return True
            lines.append(line)
            return "could not create a share link" in line

        wait_for(
            share_line_or_end, "the share link's failure in the output", 180, poll_s=0, detail=lambda: "".join(lines)
        )
        assert any("could not create a share link" in line and "Still serving locally" in line for line in lines)
        assert any("no share tunnel can be reached from this machine" in line for line in lines)
        assert not any("share=True" in line or "launch()" in line for line in lines)
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert page.status_code == 200
        # --auth guards the page's API: an anonymous config request gets no app.
        assert "secret-pass" not in page.text
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def test_sigterm_stops_the_managed_engine_too(tmp_path):
    import re

    from studio.backend.servers.supervisor import port_is_free
    from tests.browser.conftest import start_studio

    studio = start_studio(tmp_path / "outputs", tmp_path / "studio.log")
    engine_log = tmp_path / "outputs" / "logs" / "embedded-server.log"
    wait_for(  # uvicorn says it runs once it listens; "Application startup complete" comes before the bind
        lambda: engine_log.exists() and "Uvicorn running on" in engine_log.read_text(),
        "the studio's engine to listen",
        120,
    )
    port = int(re.search(r"--port (\d+)", engine_log.read_text()).group(1))
    assert not port_is_free(port)
    studio.process.send_signal(signal.SIGTERM)
    assert studio.process.wait(60) == 128 + signal.SIGTERM
    wait_for(lambda: port_is_free(port), "the engine's port to be free: the engine outlived the studio", 30)


def test_a_taken_port_is_named_before_any_url(tmp_path):
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "studio", "ui", "--port", str(port), "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is taken" in result.stderr and "--port" in result.stderr
    assert "http://" not in result.stdout and "Traceback" not in result.stderr
    assert "GRADIO_SERVER_PORT" not in result.stderr
