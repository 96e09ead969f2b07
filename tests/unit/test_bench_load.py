"""The machine's load during a cell: the CPU in use, the share of it that is the bench's own, the rest, and the
load average, from readings of the machine's counters."""

from __future__ import annotations

import psutil

from studio.backend.bench.load import LoadSampler, Reading


class Counters:
    """Readings as a machine would give them: each step adds `wall` seconds, `busy` CPU seconds (of which `own`
    are the bench's) and idle CPU seconds for the rest of its cores."""

    def __init__(self, cores: int) -> None:
        self.cores, self.at = cores, Reading(0.0, 0.0, 0.0, 0.0, 0.5)
        self.steps: list[tuple[float, float, float, float]] = []

    def step(self, wall: float, busy: float, own: float, load: float) -> None:
        self.steps.append((wall, busy, own, load))

    def __call__(self) -> Reading:
        if self.steps:
            wall, busy, own, load = self.steps.pop(0)
            total = wall * self.cores
            at = self.at
            self.at = Reading(
                at.wall_s + wall, at.cpu_total_s + total, at.cpu_idle_s + total - busy, at.own_cpu_s + own, load
            )
        return self.at


def test_the_rest_of_the_machines_use_is_told_from_the_benchs_own():
    counters = Counters(cores=2)
    sampler = LoadSampler(period_s=1.0, read=counters, cores=2)
    sampler.tick()  # the start
    counters.step(wall=1.0, busy=2.0, own=1.0, load=1.0)  # both cores busy, one of them with the bench
    sampler.tick()
    counters.step(wall=1.0, busy=1.0, own=1.0, load=2.0)  # the bench's core alone
    sampler.tick()
    load = sampler.summary()
    assert load is not None and load.samples == 2 and load.cores == 2
    assert load.cpu_percent == 75.0 and load.cpu_percent_max == 100.0
    assert load.own_cpu_percent == 50.0 and load.other_cpu_percent == 25.0
    assert load.load_avg_1m == 1.5
    assert load.columns()["other_cpu_percent"] == 25.0


def test_a_short_stretch_at_the_end_counts_in_the_mean_but_not_as_the_peak():
    counters = Counters(cores=4)
    sampler = LoadSampler(period_s=1.0, read=counters, cores=4)
    sampler.tick()
    counters.step(wall=1.0, busy=1.0, own=1.0, load=1.0)
    sampler.tick()
    counters.step(wall=0.01, busy=0.04, own=0.0, load=1.0)  # 100% for a hundredth of a second
    sampler.tick()
    load = sampler.summary()
    assert load is not None and load.cpu_percent_max == 25.0
    assert 25.0 < load.cpu_percent < 27.0


def test_no_time_gone_by_tells_nothing():
    counters = Counters(cores=2)
    sampler = LoadSampler(read=counters, cores=2)
    sampler.tick()
    sampler.tick()
    assert sampler.summary() is None


def test_the_machines_own_sampler_reads_at_start_and_stop():
    # The real counters, through psutil: one reading at each end however short the stretch (nothing timed: the
    # work goes on until the machine's CPU counters have moved past the start's).
    sampler = LoadSampler(period_s=60.0).start()
    start = sum(psutil.cpu_times())
    while sum(psutil.cpu_times()) <= start:
        sum(i * i for i in range(10_000))
    load = sampler.stop()
    assert load is not None and load.samples >= 1 and load.cores == psutil.cpu_count()
    assert 0.0 <= load.other_cpu_percent <= load.cpu_percent <= 100.0 and 0.0 <= load.own_cpu_percent <= 100.0
