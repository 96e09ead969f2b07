"""A node's GPUs split into replicas: each replica's GPUs reach its server (env or docker argv), a layout the GPUs
cannot hold is refused before anything starts, CPU replicas share the cores. No GPU needed: launch specs only."""

from __future__ import annotations

import stat

import pytest

from studio.backend.servers.launchers import LaunchError, launch_for
from studio.backend.servers.local_fleet import layout_label, managed_fleet, plan_fleet
from studio.config import StudioSettings

EIGHT = [str(index) for index in range(8)]


@pytest.fixture
def vllm(tmp_path):
    """An executable named vllm: the launch specs are checked, nothing runs."""
    path = tmp_path / "vllm"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def settings(**values) -> StudioSettings:
    return StudioSettings(_env_file=None, **values)


def test_each_replica_of_vllm_omni_gets_its_own_gpus_in_its_environment(vllm):
    fleet = settings(engine="vllm-omni", vllm_executable=vllm, gpus="0,1,2,3", replicas=2, tensor_parallel_size=2)
    plan = plan_fleet(fleet, found=[])
    assert [replica.gpus for replica in plan] == [["0", "1"], ["2", "3"]]
    specs = [launch_for(replica.settings, 9000 + replica.index) for replica in plan]
    assert [spec.env["CUDA_VISIBLE_DEVICES"] for spec in specs] == ["0,1", "2,3"]
    assert all(spec.argv[spec.argv.index("--tensor-parallel-size") + 1] == "2" for spec in specs)
    assert layout_label(fleet, plan) == "2 x TP2 on GPUs 0-3"


def test_with_docker_each_replica_is_given_its_devices():
    fleet = settings(engine="vllm-omni", use_docker=True, replicas=2, tensor_parallel_size=4)
    plan = plan_fleet(fleet, found=EIGHT)
    argvs = [launch_for(replica.settings, 9000 + replica.index).argv for replica in plan]
    assert [argv[argv.index("--gpus") + 1] for argv in argvs] == ['"device=0,1,2,3"', '"device=4,5,6,7"']


def test_every_gpu_found_is_used_when_none_are_named_and_the_width_counts_every_parallel_degree(vllm):
    fleet = settings(engine="vllm-omni", vllm_executable=vllm, replicas=2, tensor_parallel_size=2, cfg_parallel_size=2)
    plan = plan_fleet(fleet, found=EIGHT)
    assert [replica.gpus for replica in plan] == [["0", "1", "2", "3"], ["4", "5", "6", "7"]]
    assert layout_label(fleet, plan) == "2 x TP2xCFG2 on GPUs 0-7"


@pytest.mark.parametrize(
    ("values", "found", "message"),
    [
        ({"replicas": 3, "tensor_parallel_size": 4}, EIGHT, "need 12 GPUs; this machine has 8"),
        ({"replicas": 2, "tensor_parallel_size": 2, "gpus": "0,1,2"}, [], "need 4 GPUs; --gpus 0,1,2 has 3"),
    ],
)
def test_a_layout_the_gpus_cannot_hold_is_refused_before_anything_starts(values, found, message, tmp_path):
    fleet = settings(engine="vllm-omni", **values)
    with pytest.raises(LaunchError, match=message):
        managed_fleet(fleet, tmp_path, plan_fleet(fleet, found=found))
    assert not list(tmp_path.iterdir())  # no server was made, no log opened


def test_embedded_replicas_on_a_cpu_share_its_cores_and_keep_their_own_logs_and_ports(tmp_path):
    fleet = settings(replicas=2, server_port=8100)
    plan = plan_fleet(fleet, found=[], cores=8)
    assert [replica.settings.engine_threads for replica in plan] == [4, 4]
    assert [replica.settings.server_port for replica in plan] == [8100, 8101]
    assert layout_label(fleet, plan) == "2 x embedded on the CPU, 4 threads each"
    servers = managed_fleet(fleet, tmp_path, plan)
    assert [server.log_path.name for server in servers] == ["embedded-server-0.log", "embedded-server-1.log"]
    assert [server.name for server in servers] == ["replica 0", "replica 1"]
    spec = launch_for(plan[1].settings, 8101)
    assert spec.env["OMP_NUM_THREADS"] == "4" and "CUDA_VISIBLE_DEVICES" not in spec.env
