"""`omni-studio bench --cluster ray` end to end, as a subprocess: a real local Ray on 127.0.0.1 (2 CPU slots) that
the bench starts once and shuts down at the end, each layout's replicas placed as Ray actors that run the
embedded engine, small cells; and a layout that Ray cannot hold, refused before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from studio.ui.engine_status import engine_summary
from tests.page_bench import layouts_form, run_page_bench
from tests.ray_checks import Descendants, left_running
from tests.waiting import wait_for

pytest.importorskip("ray", reason="the ray extra is not installed (pip install .[ray])")

pytestmark = pytest.mark.timeout(300)

SMALL = ["--tier", "256p", "--aspect", "1:1", "--frames", "5", "--steps", "2", "--slo-seconds", "60"]


def bench_on_ray(
    out: Path, cpus: int, *args: str, timeout: float = 240
) -> tuple[subprocess.CompletedProcess, Descendants]:
    """The bench on a local Ray of `cpus` CPU slots (Ray reads them from RAY_OVERRIDE_RESOURCES, whatever the
    machine has); with every process seen under it while it ran."""
    env = {**os.environ, "RAY_OVERRIDE_RESOURCES": json.dumps({"CPU": cpus})}
    argv = [sys.executable, "-m", "studio", "bench", "--cluster", "ray", *SMALL, "--out", str(out), *args]
    process = psutil.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with Descendants(process.pid) as descendants:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            pytest.fail(f"the bench did not end within {timeout:.0f} s: {stderr[-3000:]}")
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr), descendants


@pytest.mark.long
def test_two_layouts_on_a_local_ray_are_measured_and_nothing_is_left(tmp_path):
    out = tmp_path / "report"
    result, descendants = bench_on_ray(
        out, 2, "--layouts", "1x1,2x1", "--requests", "2", "--concurrency", "2", "--warmup", "1"
    )
    seen = descendants.processes
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())

    # One local Ray on loopback for the whole bench.
    cluster = report["cluster"]
    assert cluster["kind"] == "ray" and cluster["address"].startswith("local")
    (node,) = cluster["nodes"]
    assert node["address"] == "127.0.0.1" and node["cpus"] == 2
    assert "Ray local (127.0.0.1): 1 node: 127.0.0.1 (2 CPUs, 0 GPUs)" in result.stderr
    assert len(descendants.matching("gcs_server")) == 1 and len(descendants.matching("raylet")) == 1

    one, two = report["fleets"]
    assert (one["label"], two["label"]) == ("1x1 base", "2x1 base") and "error" not in one | two
    assert one["cluster"] == two["cluster"] == "ray"
    assert len(one["endpoints"]) == 1 and len(two["endpoints"]) == 2
    # Per replica, the node Ray placed it on: each replica of 2x1 an actor of its own with its own server.
    for fleet in (one, two):
        assert [n["replica"] for n in fleet["nodes"]] == list(range(fleet["replicas"]))
        assert all(n["node"] == "127.0.0.1" and n["node_id"] == node["node_id"] for n in fleet["nodes"])
        assert all(url.startswith("http://127.0.0.1:") for url in fleet["endpoints"])
    assert len(set(two["endpoints"])) == 2
    assert "2x1 base: on Ray: replica 0 on 127.0.0.1, replica 1 on 127.0.0.1" in result.stdout

    cells = report["cells"]
    assert [(c["layout"], c["endpoints"], c["cluster"]) for c in cells] == [("1x1", 1, "ray"), ("2x1", 2, "ray")]
    for cell in cells:
        assert cell["completed"] == 2 and cell["failed"] == 0 and cell["latency_p90_s"] > 0
        assert cell["nodes"] == ", ".join(["127.0.0.1"] * cell["replicas"])
    both = {r["endpoint"] for r in report["requests"] if r["layout"] == "2x1"}
    assert both == set(two["endpoints"])  # the router used both replicas
    (chosen,) = report["recommendations"]
    assert chosen["layout"] in ("1x1", "2x1") and chosen["within_slo"]
    assert result.stdout.strip().splitlines()[-1].strip().startswith(f"256p: layout {chosen['layout']}, ")

    # The servers ran under Ray's workers, not under the bench's own process.
    # Three served (the endpoints above answered the cells); the sampler, every 0.1 s on a loaded machine, sees
    # at least one of them, and every one it sees was under a replica's actor.
    servers = descendants.matching(cmdline="-m studio.engine")
    assert 1 <= len(servers) <= 3, servers
    assert all(server.parent.startswith("ray::ReplicaHost") for server in servers), servers
    # Nothing is left: Ray's processes, its workers and the replicas' servers all ended with the bench.
    assert not left_running(seen)
    for url in one["endpoints"] + two["endpoints"]:
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/health", timeout=2)


def test_a_layout_ray_cannot_hold_is_refused_before_any_server_starts(tmp_path):
    out = tmp_path / "report"
    result, descendants = bench_on_ray(out, 1, "--layouts", "1x1,2x1", timeout=120)
    seen = descendants.processes
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        "layout 2x1: 2 replicas of 1 CPU each (all of a replica on one node); the local Ray holds 1 "
        "(1 node: 127.0.0.1 (1 CPU, 0 GPUs)): lower the replicas or --engine-threads" in result.stderr
    )
    assert not (out / "logs").exists() and not (out / "report.json").exists()
    assert not descendants.matching(cmdline="-m studio.engine")
    assert not left_running(seen)


def test_the_page_benches_layouts_on_the_studios_ray_and_its_fleet_comes_back(tmp_path):
    """The studio's own replica holds one of Ray's 2 CPU slots: the bench releases it, or 2x1 finds no room."""
    from studio.backend.controller import StudioController
    from studio.backend.servers import ray_cluster
    from tests.conftest import engine_settings

    earlier = {process.pid for process in psutil.Process().children(recursive=True)}
    ray_cluster.connect(num_cpus=2)
    settings = engine_settings(outputs_dir=tmp_path / "outputs", poll_interval_s=0.05, cluster="ray")
    controller = StudioController(settings)
    form = layouts_form("2x1")
    try:
        controller.start()
        studio_url = controller.fleet.server.base_url
        last = run_page_bench(controller, form)[-1]
        assert last.status.startswith("done in"), last.status
        assert list(last.summary["layout"]) == ["2x1"] and list(last.summary["completed"]) == [2]
        assert list(last.summary["nodes"]) == ["127.0.0.1, 127.0.0.1"]
        # The studio's fleet is back on the same Ray, a new actor with a new server.
        wait_for(
            lambda: controller.ready() or controller.start_error is not None,
            "the studio's fleet to serve again (or fail to start)",
            120,
            detail=lambda: engine_summary(controller),
        )
        assert controller.ready(), engine_summary(controller)
        assert controller.fleet.layout == "1 x embedded on Ray (local)" and ray_cluster.current() is not None
        assert controller.fleet.server.base_url != studio_url
    finally:
        controller.close()
        ray_cluster.shutdown()
    ours = [p for p in psutil.Process().children(recursive=True) if p.pid not in earlier]
    assert not left_running(ours)


def test_room_on_a_cluster_counts_whole_replicas_per_node():
    """A replica's GPUs are all on one node: 8 GPUs on two nodes of 4 hold two replicas of 4, not one of 8."""
    from studio.backend.bench.fleets import RayNode, check_room, room
    from studio.backend.servers.layouts import Layout, LayoutError
    from studio.config import StudioSettings

    nodes = [RayNode("10.0.0.1", "a", "n1", 32, 4), RayNode("10.0.0.2", "b", "n2", 2, 4)]
    assert room(nodes, {"num_gpus": 4, "num_cpus": 1}) == 2
    assert room(nodes, {"num_gpus": 8, "num_cpus": 1}) == 0
    assert room(nodes, {"num_gpus": 1, "num_cpus": 1}) == 4 + 2  # node b: 2 CPUs for its 4 GPUs
    assert room(nodes, {"num_gpus": 0, "num_cpus": 4}) == 8

    settings = StudioSettings(_env_file=None, engine="vllm-omni", tensor_parallel_size=8, ray_address="10.0.0.1:6379")
    with pytest.raises(LayoutError) as refused:
        check_room(Layout(1, 8), settings, nodes)
    assert str(refused.value) == (
        "layout 1x8: 1 replica of 8 GPUs + 1 CPU each (all of a replica on one node); the Ray cluster at "
        "10.0.0.1:6379 holds 0 (2 nodes: 10.0.0.1 (32 CPUs, 4 GPUs), 10.0.0.2 (2 CPUs, 4 GPUs)): lower the "
        "replicas or the width, or add nodes to the cluster"
    )
    four = settings.model_copy(update={"tensor_parallel_size": 4})
    assert check_room(Layout(2, 4), four, nodes) == {"num_gpus": 4, "num_cpus": 1}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--ray-address", "127.0.0.1:9"],
            1,
            "cannot join the Ray cluster at 127.0.0.1:9: nothing answers there",
        ),
        (
            ["--engine", "remote", "--url", "http://127.0.0.1:9"],
            2,
            "--cluster ray places the servers the bench starts (--engine embedded or vllm-omni)",
        ),
    ],
)
def test_a_ray_bench_that_cannot_run_says_why_at_once(tmp_path, args, code, message):
    out = tmp_path / "report"
    argv = [sys.executable, "-m", "studio", "bench", "--cluster", "ray", "--layouts", "1x1", "--out", str(out), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == code and message in result.stderr, result.stderr[-2000:]
    assert not out.exists() or not any(out.iterdir())
