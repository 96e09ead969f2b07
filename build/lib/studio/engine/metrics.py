"""Prometheus metrics of the engine, under vLLM-Omni's names where they apply."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800)


class EngineMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        self.running = Gauge(
            "vllm_omni:num_requests_running", "Requests being generated", labels, registry=self.registry
        ).labels(model_name)
        self.waiting = Gauge(
            "vllm_omni:num_requests_waiting", "Requests waiting in the queue", labels, registry=self.registry
        ).labels(model_name)
        self.success = Counter(
            "vllm_omni:requests_success",
            "Requests finished successfully",
            [*labels, "finished_reason"],
            registry=self.registry,
        ).labels(model_name, "stop")
        self.e2e = Histogram(
            "vllm_omni:e2e_request_latency_s",
            "Arrival to completion",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        self.exec = Histogram(
            "vllm_omni:diffusion_exec_s",
            "Pipeline execution",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        self.per_step = Histogram(
            "vllm_omni:diffusion_exec_per_step_s",
            "Denoising time per step",
            labels,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
            registry=self.registry,
        ).labels(model_name)
        self.postprocess = Histogram(
            "vllm_omni:diffusion_postprocess_s",
            "Decode and encode",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(model_name)

    def observe_success(self, e2e_s: float, exec_s: float, per_step_s: float, postprocess_s: float) -> None:
        self.success.inc()
        self.e2e.observe(e2e_s)
        self.exec.observe(exec_s)
        self.per_step.observe(per_step_s)
        self.postprocess.observe(postprocess_s)
