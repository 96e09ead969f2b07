"""The soak's memory check judges each engine process past its warm-up minute, and not at all when it lived no
whole minute past it."""

from __future__ import annotations

from benchmarks.cpu.soak_report import growth_by_process


def samples(pid: int, minutes: range, rss: dict[int, float]) -> list[dict]:
    """Two samples per minute of `minutes` from process `pid`, the minute's lowest being `rss[minute]`."""
    return [
        {"at_s": (m - 1) * 60.0 + at, "engine_pid": pid, "engine_rss_mb": rss[m] + extra}
        for m in minutes
        for at, extra in ((10.0, 0.0), (40.0, 50.0))
    ]


def test_a_process_that_lived_only_its_warm_up_is_not_judged():
    # Warm-up growth in the first minute, a restart during minute 3, then two minutes of the new process.
    found = growth_by_process(
        samples(1, range(1, 3), {1: 700.0, 2: 816.0}) + samples(2, range(4, 6), {4: 668.0, 5: 668.0}),
        "engine_rss_mb",
        (1, 5),
    )
    assert [entry["growth"] for entry in found] == [None, None], found


def test_growth_past_the_warm_up_is_judged():
    rss = {1: 500.0, 2: 700.0, 3: 700.0, 4: 740.0, 5: 800.0}
    (found,) = growth_by_process(samples(1, range(1, 6), rss), "engine_rss_mb", (1, 5))
    assert found["minutes"] == (2, 5) and found["from"] == 700.0 and found["to"] == 800.0
    assert abs(found["growth"] - 100.0 / 700.0) < 1e-3
