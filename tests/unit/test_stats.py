import pytest

from studio.backend.runs.stats import RequestSample, percentile, summarize


def sample(state="done", latency=1.0, created=0.0, finished=None, tier="256p", queue=0.0, inference=None):
    return RequestSample(
        state=state,
        tier=tier,
        created=created,
        finished=finished if finished is not None else created + latency,
        latency_s=latency if state == "done" else None,
        queue_wait_s=queue,
        inference_s=inference if inference is not None else latency - queue,
    )


def test_percentiles_match_hand_computed_values():
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    # Linear interpolation between closest ranks: rank = q/100 * (n-1).
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 90) == pytest.approx(9.1)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile([4.0], 99) == 4.0


def test_summary_counts_queue_wait_inference_throughput_and_goodput():
    samples = [
        sample(latency=2.0, created=0.0, queue=0.0),
        sample(latency=4.0, created=0.0, queue=2.0),
        sample(latency=6.0, created=0.0, queue=4.0),
        sample(state="failed", created=1.0, finished=3.0),
        sample(state="cancelled", created=1.0, finished=2.0),
    ]
    summary = summarize(samples, slo_s=4.0)
    assert (summary.count, summary.completed, summary.failed, summary.cancelled) == (5, 3, 1, 1)
    assert summary.latency_p50_s == pytest.approx(4.0)
    assert summary.latency_p90_s == pytest.approx(5.6)
    assert summary.latency_max_s == 6.0
    assert summary.queue_wait_mean_s == pytest.approx(2.0)
    assert summary.inference_mean_s == pytest.approx(2.0)
    assert summary.duration_s == pytest.approx(6.0)
    assert summary.throughput_per_min == pytest.approx(3 / 6.0 * 60)
    assert summary.goodput == pytest.approx(2 / 5)  # 2.0 and 4.0 are within the SLO; failures count against


def test_per_tier_breakdown_only_with_several_tiers():
    mixed = [sample(tier="256p", latency=1.0), sample(tier="480p", latency=3.0), sample(tier="480p", latency=5.0)]
    summary = summarize(mixed)
    assert set(summary.per_tier) == {"256p", "480p"}
    assert summary.per_tier["480p"].latency_p50_s == pytest.approx(4.0)
    assert summarize(mixed[1:]).per_tier == {}
    assert summarize([]).completed == 0 and summarize([]).latency_p50_s is None
