"""The autoscaler's decisions, at explicit times: out when the queue per replica stays high long enough, in when a
replica stays idle long enough, never past the bounds; the loop that carries them out and logs them; and the fleet
on this machine, planned for its maximum."""

from __future__ import annotations

import threading

import pytest

from studio.backend.servers.autoscale import (
    Action,
    Autoscaler,
    FleetLoad,
    ReplicaLoad,
    ScalingHooks,
    ScalingLoop,
    ScalingPolicy,
)

POLICY = ScalingPolicy(min_replicas=1, max_replicas=3, queue_per_replica=2.0, sustain_s=10.0, idle_s=60.0)


def load(waiting: int, *in_flight: int, starting: int = 0) -> FleetLoad:
    """Serving replicas "replica 0", "replica 1", ... with `in_flight` requests each, then `starting` ones."""
    serving = [ReplicaLoad(f"replica {i}", count, serving=True) for i, count in enumerate(in_flight)]
    coming = [ReplicaLoad(f"replica {len(in_flight) + i}", 0, serving=False, starting=True) for i in range(starting)]
    return FleetLoad(waiting, (*serving, *coming))


def test_the_queue_per_replica_counts_waiting_and_in_flight_over_serving_replicas():
    fleet = load(4, 3, 1, starting=1)
    assert fleet.queued == 8 and fleet.per_replica == 4.0
    assert FleetLoad(3, (ReplicaLoad("replica 0", 0, serving=False, starting=True),)).per_replica is None


def test_a_queue_above_the_threshold_adds_a_replica_only_once_it_stayed_there():
    scaler = Autoscaler(POLICY)
    assert scaler.decide(load(3, 2), now=100.0).action is Action.HOLD  # 5 per replica: the clock starts
    held = scaler.decide(load(3, 2), now=109.9)
    assert held.action is Action.HOLD and "9.9 s of 10" in held.reason
    added = scaler.decide(load(3, 2), now=110.0)
    assert added.action is Action.ADD and "queue 5.0 per replica, above 2" in added.reason
    # The next one waits for the queue to stay high again, with the new replica serving.
    assert scaler.decide(load(6, 2, 0), now=111.0).action is Action.HOLD
    assert scaler.decide(load(6, 2, 0), now=121.0).action is Action.ADD


def test_a_queue_that_dips_under_the_threshold_starts_its_clock_again():
    scaler = Autoscaler(POLICY)
    scaler.decide(load(3, 2), now=0.0)
    assert scaler.decide(load(0, 2), now=8.0).action is Action.HOLD  # exactly 2 per replica: not above
    assert scaler.decide(load(3, 2), now=9.0).action is Action.HOLD
    assert scaler.decide(load(3, 2), now=18.0).action is Action.HOLD
    assert scaler.decide(load(3, 2), now=19.0).action is Action.ADD


def test_no_replica_is_added_past_the_maximum_or_while_one_starts():
    scaler = Autoscaler(POLICY)
    scaler.decide(load(20, 8, 8, 8), now=0.0)
    at_most = scaler.decide(load(20, 8, 8, 8), now=100.0)
    assert at_most.action is Action.HOLD and "at the maximum of 3" in at_most.reason
    scaler = Autoscaler(POLICY)
    scaler.decide(load(20, 8, starting=1), now=0.0)
    starting = scaler.decide(load(20, 8, starting=1), now=100.0)
    assert starting.action is Action.HOLD and "a replica is starting" in starting.reason


def test_a_replica_idle_long_enough_is_removed_the_newest_first_down_to_the_minimum():
    scaler = Autoscaler(POLICY)
    assert scaler.decide(load(0, 1, 0, 0), now=0.0).action is Action.HOLD  # replicas 1 and 2 idle from now
    assert scaler.decide(load(0, 1, 0, 0), now=59.0).action is Action.HOLD
    removed = scaler.decide(load(0, 1, 0, 0), now=60.0)
    assert (removed.action, removed.replica) == (Action.REMOVE, "replica 2")
    assert removed.reason == "a replica idle for 60 s: replica 2 goes, 2 left"
    assert scaler.decide(load(0, 1, 0), now=61.0).replica == "replica 1"  # idle since 0 as well
    # At the minimum, however idle.
    assert scaler.decide(load(0, 0), now=1000.0).action is Action.HOLD


def test_the_first_replicas_stay_and_each_one_out_takes_its_own_while_of_spare_capacity():
    scaler = Autoscaler(POLICY)
    scaler.decide(load(0, 0, 1, 1), now=0.0)  # replica 0 idle from 0
    scaler.decide(load(0, 0, 0, 1), now=50.0)  # replica 1 from 50
    scaler.decide(load(0, 0, 0, 0), now=55.0)  # replica 2 from 55
    first = scaler.decide(load(0, 0, 0, 0), now=60.0)  # replica 0 has been idle long enough: the newest goes
    assert (first.action, first.replica) == (Action.REMOVE, "replica 2")
    assert scaler.decide(load(0, 0, 0), now=61.0).action is Action.HOLD  # one spare replica, one removal
    assert scaler.decide(load(0, 0, 0), now=109.0).action is Action.HOLD
    second = scaler.decide(load(0, 0, 0), now=110.0)  # replica 1's own 60 s
    assert (second.action, second.replica) == (Action.REMOVE, "replica 1")


def test_a_replica_that_gets_work_or_a_queue_in_the_studio_restarts_its_idle_clock():
    scaler = Autoscaler(POLICY)
    scaler.decide(load(0, 1, 0), now=0.0)
    scaler.decide(load(0, 1, 1), now=30.0)  # replica 1 got a request
    assert scaler.decide(load(0, 1, 0), now=61.0).action is Action.HOLD  # idle again only since 61
    assert scaler.decide(load(0, 1, 0), now=120.0).action is Action.HOLD
    assert scaler.decide(load(0, 1, 0), now=121.0).action is Action.REMOVE
    scaler = Autoscaler(POLICY)
    scaler.decide(load(0, 0, 0), now=0.0)
    scaler.decide(load(1, 0, 0), now=30.0)  # something waits in the studio: nobody is idle
    assert scaler.decide(load(0, 0, 0), now=61.0).action is Action.HOLD


def test_a_replica_is_not_removed_where_the_rest_would_be_over_the_threshold():
    scaler = Autoscaler(ScalingPolicy(1, 3, queue_per_replica=2.0, sustain_s=10.0, idle_s=0.0))
    # 3 at replica 0, replica 1 idle: 1.5 per replica now, 3 on one replica after.
    assert scaler.decide(load(0, 3, 0), now=0.0).action is Action.HOLD
    assert scaler.decide(load(0, 2, 0), now=1.0).action is Action.REMOVE


def test_below_the_minimum_a_replica_is_added_at_once():
    scaler = Autoscaler(ScalingPolicy(2, 3, queue_per_replica=2.0, sustain_s=10.0, idle_s=60.0))
    decision = scaler.decide(load(0, 0), now=0.0)
    assert decision.action is Action.ADD and "below the minimum 2" in decision.reason


def test_bounds_are_checked():
    with pytest.raises(ValueError, match="1 <= min <= max"):
        ScalingPolicy(3, 2, 2.0, 10.0, 60.0)


class FakeFleet:
    """A fleet the loop drives: its load is what the test sets; add and remove change it, or fail."""

    def __init__(self) -> None:
        self.fleet = load(9, 4)
        self.fail_add: str | None = None

    def read(self) -> FleetLoad:
        return self.fleet

    def add(self, cancelled: threading.Event) -> str:
        if self.fail_add:
            raise RuntimeError(self.fail_add)
        count = len(self.fleet.replicas)
        # The queue is served meanwhile: every replica idle, the new one too.
        self.fleet = load(0, *[0] * (count + 1))
        return f"replica {count} serving"

    def remove(self, name: str, cancelled: threading.Event) -> str:
        self.fleet = FleetLoad(0, tuple(r for r in self.fleet.replicas if r.name != name))
        return f"{name} stopped"


def test_the_loop_carries_out_decisions_and_logs_them_with_their_reasons():
    fleet, now = FakeFleet(), [0.0]
    policy = ScalingPolicy(1, 2, queue_per_replica=2.0, sustain_s=5.0, idle_s=30.0)
    loop = ScalingLoop(Autoscaler(policy), ScalingHooks(fleet.read, fleet.add, fleet.remove), clock=lambda: now[0])
    assert loop.step().action is Action.HOLD and not loop.events  # holds are not logged
    now[0] = 5.0
    assert loop.step().action is Action.ADD
    assert [(e.action, e.replica) for e in loop.events] == [("add", None), ("added", None)]
    assert loop.events[-1].reason == "replica 1 serving" and len(fleet.fleet.replicas) == 2
    now[0] = 6.0
    loop.step()  # both idle from here
    now[0] = 36.0
    assert loop.step().action is Action.REMOVE
    assert [(e.action, e.replica) for e in list(loop.events)[2:]] == [("remove", "replica 1"), ("removed", "replica 1")]
    assert [r.name for r in fleet.fleet.replicas] == ["replica 0"]


def test_a_failed_add_is_logged_and_the_loop_goes_on():
    fleet, now = FakeFleet(), [0.0]
    fleet.fail_add = "Ray found no node with room for it"
    policy = ScalingPolicy(1, 2, queue_per_replica=2.0, sustain_s=0.0, idle_s=30.0)
    loop = ScalingLoop(Autoscaler(policy), ScalingHooks(fleet.read, fleet.add, fleet.remove), clock=lambda: now[0])
    loop.step()
    assert (loop.events[-1].action, loop.events[-1].reason) == ("add failed", "Ray found no node with room for it")
    fleet.fail_add = None
    now[0] = 1.0
    assert loop.step().action is Action.ADD and loop.events[-1].action == "added"


def test_the_log_is_bounded():
    fleet = FakeFleet()
    fleet.fail_add = "no room"
    loop = ScalingLoop(
        Autoscaler(ScalingPolicy(1, 2, 2.0, 0.0, 30.0)), ScalingHooks(fleet.read, fleet.add, fleet.remove)
    )
    for _ in range(100):
        loop.step()
    assert len(loop.events) == loop.events.maxlen == 50


def test_a_fleet_on_this_machine_is_planned_for_its_maximum_and_a_replica_out_frees_its_gpus(tmp_path):
    from studio.backend.servers.launchers import LaunchError
    from studio.backend.servers.local_fleet import LocalReplicas
    from studio.config import StudioSettings

    def scaling(**values) -> StudioSettings:
        return StudioSettings(
            _env_file=None, engine="embedded", device="cuda", cfg_parallel_size=2, gpus="0,1,2,3", **values
        )

    replicas = LocalReplicas(scaling(replicas_min=1, replicas_max=2), tmp_path)
    assert replicas.layout == "1-2 x CFG2 on GPUs 0-3"
    first, second = replicas.new(), replicas.new()
    assert (first.name, first.gpus, second.name, second.gpus) == ("replica 0", ["0", "1"], "replica 1", ["2", "3"])
    replicas.retire(first)  # never started: nothing to stop, its GPUs are free again
    again = replicas.new()
    assert (again.name, again.gpus) == ("replica 0", ["0", "1"])
    with pytest.raises(LaunchError, match=r"--replicas-max 3: 3 replicas x 2 GPUs each .* need 6 GPUs"):
        LocalReplicas(scaling(replicas_min=1, replicas_max=3), tmp_path)
