"""On a CPU every layout of the embedded engine holds the same threads in all: one budget (the threads set, else
the cores) split over its replicas and their ranks, so that a bench compares layouts, not thread counts."""

from __future__ import annotations

import pytest

import studio.backend.bench.fleets as bench_fleets
import studio.backend.servers.local_fleet as local_fleet
from studio.backend.bench.config import BenchConfig
from studio.backend.servers.launchers import launch_for
from studio.backend.servers.local_fleet import layout_label, plan_fleet, thread_shares
from studio.config import StudioSettings


def settings(**values) -> StudioSettings:
    return StudioSettings(_env_file=None, engine="embedded", **values)


def threads(**values) -> list[int | None]:
    cores = values.pop("cores")
    return [replica.settings.engine_threads for replica in plan_fleet(settings(**values), found=[], cores=cores)]


def test_one_replica_takes_every_core_and_two_take_half_each():
    assert threads(replicas=1, cores=2) == [2]
    assert threads(replicas=2, cores=2) == [1, 1]
    assert threads(replicas=4, cores=8) == [2, 2, 2, 2]


def test_threads_set_are_the_budget_of_the_whole_layout():
    assert threads(replicas=1, engine_threads=4, cores=8) == [4]
    assert threads(replicas=2, engine_threads=4, cores=8) == [2, 2]


def test_what_is_left_over_goes_to_the_first_replicas_and_every_rank_keeps_one():
    assert threads(replicas=2, cores=3) == [2, 1]
    assert thread_shares(3, 4, 1) == (1, 1, 1, 1)  # more replicas than threads: one each all the same
    assert thread_shares(8, 2, 2) == (2, 2)  # two ranks a replica: 2 threads a rank, 8 in all
    label = layout_label(settings(replicas=2), plan_fleet(settings(replicas=2), found=[], cores=3))
    assert label == "2 x embedded on the CPU, 2+1 threads"


def test_a_replicas_threads_reach_its_engine():
    (only,) = plan_fleet(settings(replicas=1), found=[], cores=2)
    assert launch_for(only.settings, 7001).env["OMP_NUM_THREADS"] == "2"


def test_a_replica_on_a_gpu_keeps_the_threads_as_set():
    assert [r.settings.engine_threads for r in plan_fleet(settings(replicas=2), found=["0", "1"], cores=2)] == [
        None,
        None,
    ]


@pytest.mark.parametrize("cores", [2, 4])
def test_the_layouts_of_a_bench_on_a_cpu_hold_the_same_cores(monkeypatch, cores):
    monkeypatch.setattr(local_fleet, "cpu_cores", lambda: cores)
    monkeypatch.setattr(bench_fleets, "cpu_cores", lambda: cores)
    fleets = bench_fleets.plan_bench(settings(), BenchConfig(layouts="1x1,2x1"), found=[])
    assert [fleet.describe()["engine_threads"] for fleet in fleets] == [[cores], [cores // 2] * 2]
    assert [fleet.devices for fleet in fleets] == [cores, cores]
