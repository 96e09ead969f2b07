"""The fleet on Ray without a cluster: what a replica asks Ray for, the address its server binds, how a server
left by a dead actor is recognised, and the message where Ray is not installed."""

from __future__ import annotations

import builtins
import stat
import subprocess
import sys

import psutil
import pytest

from studio.backend.servers import ray_cluster
from studio.backend.servers.launchers import launch_for
from studio.backend.servers.ray_fleet import _end_orphan, ray_layout_label, replica_resources
from studio.config import StudioSettings


def settings(**values) -> StudioSettings:
    return StudioSettings(_env_file=None, **values)


@pytest.fixture
def fake_vllm(tmp_path):
    """An executable file named vllm: the launcher only needs it to exist; it is never run here."""
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_a_replica_asks_ray_for_its_width_in_gpus_or_its_threads_in_cpus():
    wide = settings(engine="vllm-omni", tensor_parallel_size=4, cfg_parallel_size=2)
    assert replica_resources(wide) == {"num_gpus": 8, "num_cpus": 1}
    assert replica_resources(settings(engine="embedded", device="cuda", ulysses_degree=2))["num_gpus"] == 2
    assert replica_resources(settings(engine="embedded", engine_threads=3)) == {"num_gpus": 0, "num_cpus": 3}
    assert replica_resources(settings(engine="embedded")) == {"num_gpus": 0, "num_cpus": 1}


def test_servers_bind_the_host_given_and_loopback_by_default(fake_vllm):
    embedded = launch_for(settings(engine="embedded"), 7001, host="10.0.0.5").argv
    assert embedded[embedded.index("--host") + 1] == "10.0.0.5"
    assert launch_for(settings(engine="embedded"), 7001).argv[embedded.index("--host") + 1] == "127.0.0.1"
    served = launch_for(settings(engine="vllm-omni", vllm_executable=str(fake_vllm)), 7002, host="10.0.0.5").argv
    assert served[served.index("--host") + 1] == "10.0.0.5"
    docker = launch_for(
        settings(engine="vllm-omni", vllm_executable=str(fake_vllm), use_docker=True), 7003, host="10.0.0.5"
    ).argv
    assert docker[docker.index("-p") + 1] == "10.0.0.5:7003:8000"


def test_layout_names_the_cluster():
    assert ray_layout_label(settings(engine="embedded", replicas=2, cluster="ray")) == "2 x embedded on Ray (local)"
    remote = settings(engine="vllm-omni", replicas=4, tensor_parallel_size=4, cluster="ray", ray_address="h:6379")
    assert ray_layout_label(remote) == "4 x TP4 on Ray at h:6379"
    scaling = settings(engine="embedded", cluster="ray", replicas_min=1, replicas_max=3)
    assert ray_layout_label(scaling) == "1-3 x embedded on Ray (local)"


def test_the_server_a_dead_actor_left_is_ended_but_a_later_process_on_its_pid_is_not():
    # A real process in its own group stands for the server the dead actor started.
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        started = psutil.Process(left.pid).create_time()
        _end_orphan(left.pid, started_at=started - 10.0)  # the pid now belongs to a process started later
        assert left.poll() is None
        _end_orphan(left.pid, started_at=started)  # killed, and waited for: gone, not even a zombie
        assert not psutil.pid_exists(left.pid)
    finally:
        left.kill()
        left.wait()


def test_without_ray_the_message_says_how_to_install_it(monkeypatch):
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ray_cluster.RayUnavailable, match=r"pip install \.\[ray\]"):
        ray_cluster.connect()


def test_the_ui_command_takes_the_cluster_flags():
    from studio.cli import build_parser
    from studio.cli.studio_flags import studio_settings

    argv = ["ui", "--cluster", "ray", "--ray-address", "10.0.0.1:6379", "--replicas", "4"]
    chosen = studio_settings(build_parser().parse_args(argv))
    assert (chosen.cluster, chosen.ray_address, chosen.replicas) == ("ray", "10.0.0.1:6379", 4)
    scaling = studio_settings(
        build_parser().parse_args(["ui", "--cluster", "ray", "--replicas-min", "1", "--replicas-max", "2"])
    )
    assert (scaling.replicas, scaling.replicas_min, scaling.replicas_max) == (1, 1, 2)
    assert studio_settings(build_parser().parse_args(["ui"])).cluster == "local"
