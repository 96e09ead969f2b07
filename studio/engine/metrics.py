"""Metrics of the engine, under vLLM-Omni's names where they apply: its Prometheus families, and the stage metrics a
finished job's record carries where its request asked for them."""

from __future__ import annotations

from typing import Any

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


# A pure diffusion server has one stage, id 0, whose output is the video.
STAGE_ID = 0


def stage_metrics(
    stage_durations: dict[str, float], inference_s: float, steps: int, frames: int, e2e_s: float
) -> dict[str, Any]:
    """A finished job's `metrics` (its request sent return_stage_metrics), in the shape vLLM-Omni answers: the
    stages by id under `stage_metrics`, with the final stage's id and output type beside them. vLLM-Omni's names
    where the engine measures the same thing (milliseconds), and the engine's own parts as `<part>_s` (seconds:
    `denoise_s` with the prompt's encode, `decode_s`, `encode_s` the mp4)."""
    denoise_s = stage_durations.get("denoise", 0.0)
    postprocess_s = sum(seconds for part, seconds in stage_durations.items() if part != "denoise")
    stage: dict[str, Any] = {
        "stage_id": STAGE_ID,
        "stage_name": "diffusion",
        "final_output_type": "video",
        "finish_reason": "stop",
        "num_tokens_in": 0,
        "num_tokens_out": 0,
        "stage_gen_time_ms": round(inference_s * 1000.0, 3),
        "postprocess_time_ms": round(postprocess_s * 1000.0, 3),
        "denoise_step_latency_ms": round(denoise_s * 1000.0 / max(1, steps), 3),
        "output_unit_type": "video",
        "output_unit_count": 1,
        "video_frames": frames,
        "e2e_latency_s": round(e2e_s, 4),
        **{f"{part}_s": round(seconds, 4) for part, seconds in stage_durations.items()},
    }
    return {
        "stage_metrics": {str(STAGE_ID): stage},
        "stage_id": STAGE_ID,
        "final_output_type": "video",
        "num_tokens_in": 0,
        "num_tokens_out": 0,
    }
