"""A fleet that follows its load, on this CPU, with embedded replicas of one thread each, between 1 and 2: on a
local Ray head on loopback (2 CPUs, no dashboard, no usage stats), and on this machine without Ray. A queue that
stays long adds a second replica, which takes some of the requests; every request is made once; idle, the fleet
goes back to one, and the replica taken out leaves neither its server nor (on Ray) its worker behind; shutting
down leaves no Ray or server process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from studio.backend.controller import StudioController
from studio.backend.runs.request_state import RequestState, RequestView
from studio.backend.runs.run import Run
from studio.backend.runs.spec import RunSpec
from studio.backend.servers.metrics import ServerMetrics, scrape
from studio.backend.servers.supervisor import ManagedServer, ServerState
from studio.ui.engine_status import engine_summary
from tests.conftest import engine_settings
from tests.waiting import wait_for, wait_for_async

pytestmark = pytest.mark.timeout(300)

BATCH = 8  # requests of one run; a replica has 8 in-flight slots, so the rest of the load waits in the studio
QUEUE_PER_REPLICA = 2.0
SUSTAIN_S = 1.0
IDLE_S = 4.0
LOAD_DEADLINE_S = 120.0


def descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def named(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:160]}"
    except psutil.Error:
        return f"{process.pid} (gone)"


def scaling_controller(outputs: Path, **values: object) -> StudioController:
    settings = engine_settings(
        outputs_dir=outputs,
        poll_interval_s=0.05,
        replicas_min=1,
        replicas_max=2,
        scale_out_queue=QUEUE_PER_REPLICA,
        scale_out_after_s=SUSTAIN_S,
        scale_in_idle_s=IDLE_S,
        **values,
    )
    controller = StudioController(settings)
    controller.fleet.autoscale_interval_s = 0.2
    return controller


def spec(prompt: str, copies: int, steps: int = 8) -> RunSpec:
    return RunSpec(
        prompts=[prompt], copies=copies, tier="256p", aspect="1:1", frames=9, steps=steps, concurrency=copies
    )


async def load_until_a_second_replica_serves(
    fleet: StudioController, on_added: Callable[[ManagedServer], None] = lambda _server: None
) -> tuple[list[RequestView], float, ManagedServer, list[ServerMetrics]]:
    """Load that keeps the queue above the threshold (runs of BATCH more whenever fewer than BATCH wait in the
    studio) until a second replica has taken a request; then every run to its end. Returns the requests, when the
    load began, the replica added, and what each server says it made."""
    runs: list[Run] = []
    added: list[ManagedServer] = []
    loaded_at = time.time()

    async def second_replica_serves() -> bool:
        """Whether the added replica has taken a request; if not yet, more load, and the replica once added."""
        if added and any(view.endpoint == added[0].base_url for run in runs for view in run.views):
            return True
        if sum(run.unsent for run in runs) < BATCH:
            runs.append(fleet.new_run(spec("a red circle", BATCH)))
            runs[-1].start()
        if not added and len(fleet.fleet.servers) == 2:
            added.append(fleet.fleet.servers[1])
            await asyncio.to_thread(on_added, added[0])
        return False

    await wait_for_async(
        second_replica_serves,
        "a second replica serving",
        LOAD_DEADLINE_S,
        detail=lambda: f"{len(fleet.fleet.servers)} servers, {sum(run.unsent for run in runs)} requests unsent",
    )
    assert fleet.dispatcher.slots == 16  # the in-flight slots follow the replicas: 8 each
    for run in runs:
        await run.wait()
    made = await asyncio.gather(*(scrape(server.base_url) for server in fleet.fleet.servers))  # before it goes idle
    return [view for run in runs for view in run.views], loaded_at, added[0], made


def check_scaled_out(fleet: StudioController, views: list[RequestView], second: ManagedServer, made) -> dict:
    """Every request done, once: each server made as many videos as the studio got from it, all of them together;
    the added replica made some. Returns the requests by server."""
    first = fleet.fleet.servers[0]
    assert second.name == "replica 1" and second.base_url.startswith("http://127.0.0.1:")
    assert all(view.state is RequestState.DONE for view in views), [view.error for view in views]
    assert len({view.id for view in views}) == len(views)
    by_server = {url: sum(view.endpoint == url for view in views) for url in (first.base_url, second.base_url)}
    assert by_server[second.base_url] > 0 and sum(by_server.values()) == len(views)
    assert {metrics.url: metrics.succeeded for metrics in made} == {url: float(n) for url, n in by_server.items()}
    assert fleet.fleet.scaling is not None
    events = list(fleet.fleet.scaling.events)
    assert [(event.action, event.replica) for event in events[:2]] == [("add", None), ("added", None)]
    assert f"above {QUEUE_PER_REPLICA:g}" in events[0].reason and "replica 1 serving" in events[1].reason
    return by_server


def check_back_to_one(fleet: StudioController, first: ManagedServer, gone: list[int]) -> None:
    """Idle: the newest replica goes, and the processes in `gone` with it; the first one stays and serves."""
    assert fleet.fleet.scaling is not None
    wait_for(lambda: fleet.fleet.scaling.events[-1].action == "removed", "the fleet to be back to one replica", 60)
    events = list(fleet.fleet.scaling.events)[2:]
    assert [(event.action, event.replica) for event in events] == [("remove", "replica 1"), ("removed", "replica 1")]
    assert "a replica idle for" in events[0].reason
    assert fleet.fleet.servers == [first] and first.state is ServerState.READY
    assert [endpoint.url for endpoint in fleet.fleet.pool.endpoints] == [first.base_url]
    assert fleet.dispatcher.slots == 8
    _gone, alive = psutil.wait_procs([psutil.Process(pid) for pid in gone if psutil.pid_exists(pid)], timeout=30)
    assert not [process for process in alive if process.status() != psutil.STATUS_ZOMBIE], list(map(named, alive))
    assert "1 of 1 ready" in engine_summary(fleet)
    again = asyncio.run(fleet.new_run(spec("one more", 2, steps=2)).wait())
    assert [view.state for view in again] == [RequestState.DONE] * 2


# ---- on Ray --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray():
    return pytest.importorskip("ray", reason="the ray extra is not installed (pip install .[ray])")


@pytest.fixture(scope="module")
def earlier(ray) -> set[int]:
    """Processes this test run had before the fleet (another module's engine, say): not the fleet's to stop."""
    return {process.pid for process in descendants()}


@pytest.fixture(scope="module")
def ray_fleet(tmp_path_factory, earlier) -> Iterator[StudioController]:
    from studio.backend.servers import ray_cluster

    connection = ray_cluster.connect(num_cpus=2)
    assert connection.started_here and connection.local
    controller = scaling_controller(tmp_path_factory.mktemp("ray-scale") / "outputs", cluster="ray")
    try:
        controller.start()
        yield controller
    finally:
        controller.close()
        ray_cluster.shutdown()


def test_on_ray_scale_out_from_one_to_two_replicas_under_load_and_back_to_one_when_idle(ray_fleet):
    fleet = ray_fleet
    first = fleet.fleet.servers[0]
    assert first.name == "replica 0" and first.state is ServerState.READY
    assert "1-2 x embedded on Ray (local)" in engine_summary(fleet) and "1 of 1 ready" in engine_summary(fleet)
    workers: list[int] = []

    def remember_its_worker(server: ManagedServer) -> None:
        workers.append(server.status_report()["node_pid"])

    views, loaded_at, second, made = asyncio.run(load_until_a_second_replica_serves(fleet, remember_its_worker))
    by_server = check_scaled_out(fleet, views, second, made)
    assert second.node and "for Ray to place it" in fleet.fleet.scaling.events[1].reason
    decided, up = fleet.fleet.scaling.events[0].at, fleet.fleet.scaling.events[1].at
    serving_at = min(view.timings.sent for view in views if view.endpoint == second.base_url)
    print(
        f"\non Ray: queue above {QUEUE_PER_REPLICA:g} per replica -> second replica serving: "
        f"{serving_at - loaded_at:.1f} s (decided after {decided - loaded_at:.1f} s; replica up {up - decided:.1f} s "
        f"after the decision); {by_server[second.base_url]} of {len(views)} requests made there; "
        f"{fleet.fleet.scaling.events[1].reason}"
    )
    # Its server and its Ray worker go with it: Ray has its CPU back.
    check_back_to_one(fleet, first, [second.pid, *workers])


def test_on_ray_shutting_down_leaves_no_ray_worker_or_server_process(ray_fleet, earlier, ray):
    from studio.backend.servers import ray_cluster

    ours = [process for process in descendants() if process.pid not in earlier]
    names = {process.name() for process in ours}
    assert "raylet" in names and "gcs_server" in names
    assert {server.pid for server in ray_fleet.fleet.servers} <= {process.pid for process in ours}
    ray_fleet.close()
    assert ray_fleet.fleet.scaling is not None and not ray_fleet.fleet.scaling.running
    ray_cluster.shutdown()
    _gone, alive = psutil.wait_procs(ours, timeout=60)  # a loaded 2-core machine stops them slowly
    assert not alive, [named(process) for process in alive]
    assert not ray.is_initialized()


# ---- on this machine -----------------------------------------------------------------------------------------
def test_on_this_machine_the_fleet_scales_out_and_back_in_the_same_way(tmp_path):
    before = {process.pid for process in descendants()}
    fleet = scaling_controller(tmp_path / "outputs")
    try:
        fleet.start()
        first = fleet.fleet.servers[0]
        assert "1-2 x embedded on the CPU, 1 thread each" in engine_summary(fleet)
        views, loaded_at, second, made = asyncio.run(load_until_a_second_replica_serves(fleet))
        by_server = check_scaled_out(fleet, views, second, made)
        decided, up = fleet.fleet.scaling.events[0].at, fleet.fleet.scaling.events[1].at
        serving_at = min(view.timings.sent for view in views if view.endpoint == second.base_url)
        print(
            f"\non this machine: queue above {QUEUE_PER_REPLICA:g} per replica -> second replica serving: "
            f"{serving_at - loaded_at:.1f} s (decided after {decided - loaded_at:.1f} s; replica up "
            f"{up - decided:.1f} s after the decision); {by_server[second.base_url]} of {len(views)} requests made there"
        )
        check_back_to_one(fleet, first, [second.pid])
    finally:
        fleet.close()
    left = [process for process in descendants() if process.pid not in before and process.is_running()]
    assert not [process for process in left if process.status() != psutil.STATUS_ZOMBIE], list(map(named, left))
