"""Reading a server's Prometheus /metrics: the vllm_omni:* queue gauges and counters the studio shows."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from studio.backend.clients.http import async_client

WATCHED = (
    "vllm_omni:num_requests_running",
    "vllm_omni:num_requests_waiting",
    "vllm_omni:requests_success_total",
)


@dataclass(frozen=True)
class ServerMetrics:
    url: str
    running: float | None
    waiting: float | None
    succeeded: float | None
    error: str | None = None


def parse_metrics(text: str) -> dict[str, float]:
    """Sum of each watched sample over its labels (a server may label by model, stage or replica)."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in WATCHED:
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


async def scrape(root_url: str, timeout_s: float = 5.0) -> ServerMetrics:
    url = root_url.rstrip("/").removesuffix("/v1") + "/metrics"
    try:
        async with async_client(timeout_s) as http:
            response = await http.get(url)
        response.raise_for_status()
        values = parse_metrics(response.text)
    except (httpx.HTTPError, ValueError) as exc:
        return ServerMetrics(root_url, None, None, None, error=f"{type(exc).__name__}: {exc}")
    return ServerMetrics(
        root_url,
        values.get("vllm_omni:num_requests_running"),
        values.get("vllm_omni:num_requests_waiting"),
        values.get("vllm_omni:requests_success_total"),
    )
