"""A latency from pressing Generate, its parts, and throughput over the time work was in flight (stats.py)."""

import pytest

from studio.backend.clients.base import RequestTimings
from studio.backend.runs.stats import (
    InFlightClock,
    LatencyParts,
    RequestSample,
    in_flight_intervals,
    latency_parts,
    latency_parts_from_record,
    summarize,
    throughput_so_far,
)


def timings(created=0.0, sent=3.0, last_queued=None, completed=8.0, downloaded=8.5, server_inference=None):
    """A request sent after `sent - created` s in the studio, seen queued last at `last_queued`, done at the server
    at `completed` and on disk at `downloaded`."""
    return RequestTimings(
        created=created,
        sent=sent,
        accepted=sent,
        last_queued=sent if last_queued is None else last_queued,
        first_running=None,
        last_unfinished=completed - 0.2,
        completed=completed,
        downloaded=downloaded,
        server_inference_s=server_inference,
    )


def done(created, end, sent=None, tier="256p") -> RequestSample:
    """A request done: submitted at `created`, its video in the page at `end`."""
    t = timings(created=created, sent=created if sent is None else sent, completed=end - 0.1, downloaded=end)
    return RequestSample.of("done", tier, t, finished=end)


def test_the_latency_runs_from_the_submit_and_its_parts_add_up_to_it():
    t = timings(created=10.0, sent=13.0, last_queued=14.0, completed=20.0, downloaded=20.5, server_inference=5.5)
    parts = latency_parts(t)
    assert parts.latency_s == pytest.approx(10.5)  # the studio's own wait included
    assert parts.studio_wait_s == pytest.approx(3.0)
    assert parts.download_s == pytest.approx(0.5)
    assert parts.server_latency_s == pytest.approx(t.latency_s) == pytest.approx(7.5)  # from sending, named apart
    total = parts.studio_wait_s + parts.queue_s + parts.inference_s + parts.download_s
    assert total == pytest.approx(parts.latency_s)


def test_queue_keeps_its_lower_bound_and_inference_stays_an_upper_bound():
    t = timings(sent=0.0, last_queued=2.0, completed=9.0, downloaded=9.0, server_inference=6.0)
    parts = latency_parts(t)
    assert parts.queue_s == pytest.approx(t.queue_wait_s)  # the lower bound, as the tables' headers say
    assert parts.inference_s >= t.inference_s  # the rest of the server's time: never below the tighter upper bound


def test_a_server_that_cannot_tell_queue_from_inference_gives_only_its_time_at_the_server():
    t = RequestTimings(created=0.0, sent=1.0, completed=7.0, downloaded=7.2)  # no poll saw it queued or running
    parts = latency_parts(t)
    assert parts.queue_s is None and parts.inference_s is None
    assert parts.at_server_s == pytest.approx(6.0) and parts.latency_s == pytest.approx(7.2)
    summary = summarize([RequestSample.of("done", "256p", t, finished=7.2)])
    assert summary.queue_wait_mean_s is None and summary.inference_mean_s is None  # unknown, never made up
    assert summary.latency_max_s == pytest.approx(7.2)


def test_unfinished_parts_are_unknown_and_the_stored_record_gives_the_same_parts():
    sent_only = RequestTimings(created=0.0, sent=2.0)
    assert latency_parts(sent_only) == LatencyParts(studio_wait_s=2.0)
    t = timings(created=1.0, sent=4.0, last_queued=5.0, completed=11.0, downloaded=11.4, server_inference=5.0)
    assert latency_parts_from_record(t.as_dict()) == latency_parts(t)
    assert latency_parts_from_record({}) == LatencyParts()
    failed = timings(created=0.0, sent=1.0, completed=1.5, downloaded=None)  # it ended without a video
    assert latency_parts(failed).download_s is None and latency_parts(failed).inference_s == pytest.approx(0.5)


def test_copies_at_concurrency_one_read_their_queue_in_the_studio():
    # Six copies submitted at once, one at a time: each waits for those before it, as the requests table shows.
    samples = [done(created=0.0, sent=5.0 * k, end=5.0 * k + 5.0) for k in range(6)]
    summary = summarize(samples)
    assert summary.latency_max_s == pytest.approx(30.0)  # the last one's wait from Generate to its video
    assert summary.latency_p50_s == pytest.approx(17.5)
    assert summary.studio_wait_mean_s == pytest.approx(12.5)
    assert summary.server_latency_p50_s == pytest.approx(5.0)  # the server-side figure, beside it
    assert summary.throughput_per_min == pytest.approx(6 / 30.0 * 60)


def test_throughput_leaves_out_the_idle_time_between_runs():
    first = [done(created=0.0, end=20.0)]
    later = [done(created=260.0, sent=260.0 + 6.0 * k, end=266.0 + 6.0 * k) for k in range(5)]  # 5 in 30 s
    assert summarize(later).throughput_per_min == pytest.approx(10.0)
    session = summarize(first + later)
    assert session.in_flight_s == pytest.approx(50.0) and session.duration_s == pytest.approx(290.0)
    assert session.throughput_per_min == pytest.approx(6 / 50.0 * 60)


def test_one_video_is_a_rate_over_its_own_time_and_the_curve_ends_at_it():
    one = [done(created=100.0, end=119.26)]
    summary = summarize(one)
    assert summary.in_flight_s == pytest.approx(19.26)
    assert summary.throughput_per_min == pytest.approx(60 / 19.26)
    series = throughput_so_far(one)
    assert series[0] == (0.0, 0.0) and series[-1][0] == pytest.approx(19.26)
    assert series[-1][1] == pytest.approx(summary.throughput_per_min)


def test_each_tier_counts_over_its_own_time_in_flight():
    samples = [done(created=0.0, end=10.0, tier="256p"), done(created=0.0, end=20.0, tier="256p")]
    samples.append(done(created=300.0, end=301.2, tier="720p"))
    per_tier = summarize(samples).per_tier
    assert per_tier["256p"].in_flight_s == pytest.approx(20.0)
    assert per_tier["720p"].in_flight_s == pytest.approx(1.2)  # its window is named beside its rate
    assert per_tier["720p"].throughput_per_min == pytest.approx(50.0)


def test_the_in_flight_clock_leaves_out_gaps_and_keeps_each_stretch_whole():
    assert in_flight_intervals([(5, 8), (0, 2), (1, 3), (8, 9)]) == [(0, 3), (5, 9)]
    clock = InFlightClock([(100.0, 110.0), (400.0, 405.0), (402.0, 408.0)])
    assert clock.total_s == pytest.approx(18.0)
    assert clock(100.0) == 0.0 and clock(110.0) == pytest.approx(10.0)
    assert clock(250.0) == pytest.approx(10.0)  # idle: the end of the stretch before
    assert clock(401.0) == pytest.approx(11.0) and clock(408.0) == pytest.approx(18.0)
    assert clock(50.0) == 0.0
