"""The embedded engine on a GPU against the plain diffusers pipeline call, in one run.

Model: Wan2.1-T2V-1.3B's architecture in diffusers (WanTransformer3DModel with its real configuration,
AutoencoderKLWan, a UMT5-XXL-sized text encoder) with random weights: nothing is downloaded, and speed does
not depend on weight values. The tokenizer is the tiny model's (ids only; the encoder always sees 512 tokens).

Baseline: `pipe(...)` in bf16, eager, one request at a time. Engine: the engine's VideoGenerator (batched
denoising loop, fused classifier-free guidance, cached text embeddings, the fastest attention kernel, the
transformer's blocks compiled and warmed at start-up) behind its JobManager (batching scheduler, mp4 encoding).

    python benchmarks/gpu/engine_gpu.py --out DIR                 # full run: 256p and 480p (16:9), 189 frames, 20 steps, CFG 5
    python benchmarks/gpu/engine_gpu.py --out DIR --smoke         # tiny model, 2 steps: checks the script end to end
    python benchmarks/gpu/engine_gpu.py --out DIR --device cpu --smoke

    python benchmarks/gpu/engine_gpu.py --out DIR --replicas 2    # 2 engine servers (a GPU each) behind the router vs 1

    # One request on 2 GPUs: each layout's engine started twice (a cold compile cache, then warm), then one
    # request at a time at each tier; layouts: 1, cfg2, ulysses2, cfg2xulysses2
    python benchmarks/gpu/engine_gpu.py --out DIR --layouts 1,cfg2,ulysses2 --tiers 480p,720p

Writes DIR/engine_gpu.json (every figure; DIR/replicas.json for --replicas, DIR/layouts.json for --layouts)
and prints a table.

With --layouts the model is saved to disk once (the text encoder as with --replicas) and each start is a
fresh process (`--probe-layout`): it loads the model on its GPUs (followers on the next GPUs), warms each tier
at batch 1 and reports when it was ready, counted from its launch; the warm start reuses the cold one's
compile cache folder. Latencies are measured in the warm start, through the engine's JobManager; then the
frames of one request (the same seed for every layout) are compared with one GPU's: mean and largest
difference in uint8 levels, and PSNR.

With --replicas the model is saved to disk once (with a 2-layer stand-in of the text encoder, which the
engine's cache of prompt embeddings makes a small share of the work) and each replica is a real
`python -m studio.engine` server on its own GPU; the studio's router (EndpointPool) and client send the same
closed-loop load to one replica, then to all, alternating.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: `studio`, `benchmarks`

from benchmarks.harness import ROOT
from benchmarks.harness.engine_jobs import engine_params, run_engine_closed_loop, submit_and_wait
from benchmarks.harness.servers import wait_healthy
from benchmarks.harness.wan_model import (
    TIERS,
    build_pipeline,
    matmul_rate,
    matmul_rate_burst,
    parameters,
    peak_gib,
    peak_reset,
    saved_model,
    sync,
)
from studio.engine.generator import VideoGenerator
from studio.engine.jobs import JobManager
from studio.engine.metrics import EngineMetrics

BARS = {
    "latency_256p": 0.55,
    "latency_480p": 0.78,
    "throughput_c8_256p": 2.5,
    "mfu_480p": 0.72,
}
log = logging.getLogger("engine_gpu")


class ForwardTimer:
    """Device time of every forward of a module (events; no sync in the loop) and the samples it saw."""

    def __init__(self, module: torch.nn.Module, device: str):
        self.device, self.enabled = device, False
        self.outer = False  # set while TimedGraphs times a call from outside the module
        self.records: list[tuple[Any, Any, int]] = []
        self._start: Any = None
        module.register_forward_pre_hook(self._pre, with_kwargs=True)
        module.register_forward_hook(self._post, with_kwargs=True)

    def _event(self) -> Any:
        if self.device == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _pre(self, module: Any, args: Any, kwargs: dict) -> None:
        if self.enabled and not self.outer:
            self._start = self._event()

    def _post(self, module: Any, args: Any, kwargs: dict, output: Any) -> None:
        if self.enabled and not self.outer:
            hidden = kwargs.get("hidden_states", args[0] if args else None)
            self.records.append((self._start, self._event(), int(hidden.shape[0])))

    def reset(self) -> None:
        self.records = []

    def totals(self) -> tuple[float, int, int]:
        """(seconds, forwards, samples)."""
        sync(self.device)
        seconds = 0.0
        for start, end, _ in self.records:
            seconds += start.elapsed_time(end) / 1000 if self.device == "cuda" else end - start
        return seconds, len(self.records), sum(n for _, _, n in self.records)


class TimedGraphs:
    """The engine's CUDA-graphed transformer forward, timed like the module's own forwards (a replayed graph
    never calls the module, so its hooks cannot see it)."""

    def __init__(self, graphs: Any, timer: ForwardTimer):
        self._graphs, self._timer = graphs, timer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graphs, name)

    def __call__(self, hidden_states: Any, timestep: Any, context: Any) -> Any:
        timer = self._timer
        if not timer.enabled:
            return self._graphs(hidden_states, timestep, context)
        start = timer._event()
        timer.outer = True
        try:
            out = self._graphs(hidden_states, timestep, context)
        finally:
            timer.outer = False
        timer.records.append((start, timer._event(), int(hidden_states.shape[0])))
        return out


def transformer_flops(pipe: Any, width: int, height: int, frames: int, device: str) -> float:
    """FLOPs of one transformer forward for one sample (matmuls and attention), counted by torch."""
    from torch.utils.flop_counter import FlopCounterMode

    transformer = pipe.transformer
    latent_frames = (frames - 1) // pipe.vae_scale_factor_temporal + 1
    shape = (1, 16, latent_frames, height // pipe.vae_scale_factor_spatial, width // pipe.vae_scale_factor_spatial)
    x = torch.randn(shape, device=device, dtype=transformer.dtype)
    text = torch.randn(1, 512, transformer.config.text_dim, device=device, dtype=transformer.dtype)
    t = torch.tensor([500.0], device=device)
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        transformer(hidden_states=x, timestep=t, encoder_hidden_states=text, return_dict=False)
    return float(counter.get_total_flops())


def compiled_graphs() -> int:
    # Dynamo's own statistics: torch has no public count of the graphs it compiled.
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def text_encoder_cost(pipe: Any, device: str) -> float:
    """Seconds to encode one prompt (512 tokens), median of 5."""
    times = []
    with torch.inference_mode():
        for i in range(6):
            sync(device)
            started = time.perf_counter()
            pipe.encode_prompt(
                prompt=[f"cost probe {i}"], do_classifier_free_guidance=False, max_sequence_length=512, device=device
            )
            sync(device)
            times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def vae_decode_probe(pipe: Any, device: str, tiers: list[str], frames: int) -> dict[str, float]:
    """VAE decode seconds at each tier: one video, and eight together at 256p (cuDNN autotuner as set now)."""
    out: dict[str, float] = {}
    vae = pipe.vae
    latent_frames = (frames - 1) // 4 + 1
    with torch.inference_mode():
        for tier in tiers:
            width, height = TIERS[tier]
            for batch in (1, 8) if tier == "256p" else (1,):
                z = torch.randn(batch, 16, latent_frames, height // 8, width // 8, device=device, dtype=vae.dtype)
                vae.decode(z, return_dict=False)
                sync(device)
                started = time.perf_counter()
                vae.decode(z, return_dict=False)
                sync(device)
                out[f"{tier} batch {batch}"] = round(time.perf_counter() - started, 4)
    return out


def run_baseline(
    pipe: Any, args: argparse.Namespace, tier: str, timer: ForwardTimer, flops: float, rate: float
) -> dict[str, Any]:
    """The plain diffusers call, eager bf16, one request at a time."""
    width, height = TIERS[tier]
    repeats = args.repeats + 2 if tier == "256p" else max(1, args.repeats - 1)  # 256p: CPU-bound, noisier
    latencies = []
    peak_reset(args.device)
    timer.reset()
    with torch.inference_mode():
        for i in range(repeats + 1):  # the first is a warm-up
            timer.enabled = i > 0
            sync(args.device)
            started = time.perf_counter()
            pipe(
                prompt=f"a red circle moving left, baseline request {i}",
                height=height,
                width=width,
                num_frames=args.frames,
                num_inference_steps=args.steps,
                guidance_scale=args.guidance,
                generator=torch.Generator("cpu").manual_seed(i),
                output_type="np",
            )
            sync(args.device)
            if i > 0:
                latencies.append(time.perf_counter() - started)
    timer.enabled = False
    seconds, forwards, samples = timer.totals()
    latency = statistics.median(latencies)
    return {
        "latencies_s": [round(x, 4) for x in latencies],
        "latency_s": round(latency, 4),
        "throughput_videos_per_s": round(1 / latency, 4),
        "transformer_s_per_video": round(seconds / repeats, 4),
        "transformer_forwards": forwards,
        "transformer_samples": samples,
        "transformer_tflops": round(flops * samples / seconds / 1e12, 1) if seconds else None,
        "mfu": round(flops * samples / seconds / rate, 4) if seconds and rate == rate else None,
        "peak_gib": peak_gib(args.device),
    }


def run_engine_c1(
    manager: JobManager, args: argparse.Namespace, tier: str, timer: ForwardTimer, flops: float, rate: float
) -> dict[str, Any]:
    """One request at a time; the first after start-up is reported apart (it shows whether a request waited
    for a compile); the median is over the rest."""
    repeats = args.repeats if tier == "256p" else max(1, args.repeats - 1)
    latencies, records, details = [], [], []
    peak_reset(args.device)
    timer.reset()
    first_s, first_job = submit_and_wait(manager, engine_params(args, tier, 999))
    timer.enabled = True
    for i in range(repeats):
        latency, job = submit_and_wait(manager, engine_params(args, tier, 1000 + i))
        if job.status != "completed":
            raise RuntimeError(f"engine job failed: {job.error}")
        latencies.append(latency)
        records.append(job.record())
        details.append(job.encode_detail)
    timer.enabled = False
    seconds, forwards, samples = timer.totals()
    latency = statistics.median(latencies)
    return {
        "first_request_s": round(first_s, 4),
        "first_request_stages": first_job.record().stage_durations,
        "latencies_s": [round(x, 4) for x in latencies],
        "latency_s": round(latency, 4),
        "stage_durations": records[-1].stage_durations,
        "inference_time_s": records[-1].inference_time_s,
        "encode_detail": details[-1],
        "transformer_s_per_video": round(seconds / repeats, 4),
        "transformer_forwards": forwards,
        "transformer_samples": samples,
        "transformer_tflops": round(flops * samples / seconds / 1e12, 1) if seconds else None,
        "mfu": round(flops * samples / seconds / rate, 4) if seconds and rate == rate else None,
        "peak_gib": peak_gib(args.device),
    }


def run_replicas(args: argparse.Namespace) -> int:
    import asyncio
    import subprocess

    from studio.backend.clients.router import Endpoint, EndpointPool
    from studio.backend.clients.vllm_omni import VideoClient
    from studio.protocol import VideoRequest

    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    out_file = args.out / "replicas.json"
    model_dir, report["save_s"] = saved_model(args)
    count = args.replicas
    servers, logs = [], []
    started = time.perf_counter()
    for i in range(count):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(i), "PYTHONUNBUFFERED": "1"}
        log_file = (args.out / f"replica{i}.log").open("w")
        logs.append(log_file)
        command = [sys.executable, "-m", "studio.engine", "--model", str(model_dir), "--port", str(8100 + i)]
        command += ["--no-guardrails", "--device", args.device, "--max-batch", str(args.max_batch)]
        command += ["--warmup", f"320x192x{args.frames}" if args.device == "cuda" else ""]
        command += ["--batch-wait-ms", str(args.batch_wait_ms), "--output-dir", tempfile.mkdtemp(prefix=f"r{i}-")]
        servers.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT))
    urls = [f"http://127.0.0.1:{8100 + i}" for i in range(count)]
    deadline = time.monotonic() + 300
    for url, server in zip(urls, servers, strict=True):
        wait_healthy(url, server, deadline - time.monotonic(), interval_s=0.2)
    report["start_to_ready_s"] = round(time.perf_counter() - started, 1)
    model_name = model_dir.name

    async def closed_loop(pool_urls: list[str], requests: int, concurrency: int, tag: str) -> dict[str, Any]:
        pool = EndpointPool([Endpoint(url=u, client=VideoClient(u, poll_interval_s=0.1)) for u in pool_urls])
        queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(requests):
            queue.put_nowait(n)
        latencies: list[float] = []
        failures: list[str] = []
        dest = Path(tempfile.mkdtemp(prefix=f"{tag}-"))

        async def worker() -> None:
            while not queue.empty():
                n = queue.get_nowait()
                request = VideoRequest(
                    prompt=f"a red circle moving left, {tag} request {n}",
                    model=model_name,
                    width=320,
                    height=192,
                    num_frames=args.frames,
                    fps=16,
                    num_inference_steps=args.steps,
                    guidance_scale=args.guidance,
                    seed=n,
                )
                endpoint = pool.acquire()
                began = time.perf_counter()
                outcome = await endpoint.client.run(request, dest / f"{n}.mp4")
                pool.release(endpoint, outcome.ok)
                latencies.append(time.perf_counter() - began)
                if not outcome.ok:
                    failures.append(str(outcome.record.error))

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - began
        await pool.close()
        return {
            "replicas": len(pool_urls),
            "requests": requests,
            "failed": len(failures),
            "wall_s": round(wall, 3),
            "videos_per_s": round((requests - len(failures)) / wall, 4),
            "latency_p50_s": round(statistics.median(latencies), 3),
            "per_endpoint": {ep.url: ep.completed for ep in pool.endpoints},
        }

    async def measure() -> None:
        # One short round on every replica first: the first requests after start-up settle the loop.
        report["warm"] = await closed_loop(urls, 2 * count, 2 * count, "warm")
        report["rounds"] = []
        for r in range(args.rounds):
            one = await closed_loop(urls[:1], args.replica_requests, args.replica_concurrency, f"one{r}")
            many = await closed_loop(urls, args.replica_requests, args.replica_concurrency, f"many{r}")
            report["rounds"].append({"one": one, "many": many})
            out_file.write_text(json.dumps(report, indent=2))
            print(f"round {r}: 1 replica {one['videos_per_s']} videos/s, {count}: {many['videos_per_s']} videos/s")

    try:
        asyncio.run(measure())
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)
        for log_file in logs:
            log_file.close()
    ones = [r["one"]["videos_per_s"] for r in report["rounds"]]
    manys = [r["many"]["videos_per_s"] for r in report["rounds"]]
    report["throughput_ratio"] = round(statistics.median(manys) / statistics.median(ones), 3)
    out_file.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=1))
    return 0


def parse_layout(name: str) -> tuple[int, int, bool]:
    """ "1" -> (1, 1); "cfg2" -> (2, 1); "ulysses2" -> (1, 2); "cfg2xulysses2" -> (2, 2); and whether the ranks
    split the VAE decode: a "-decode0" suffix has rank 0 decode alone ("cfg2-decode0")."""
    name, _, decode = name.partition("-")
    if decode not in ("", "decode0"):
        raise ValueError(f"a layout ends in -decode0 or nothing, got {decode!r}")
    cfg = ulysses = 1
    if name != "1":
        for part in name.split("x"):
            if part.startswith("cfg"):
                cfg = int(part[3:])
            elif part.startswith("ulysses"):
                ulysses = int(part[7:])
            else:
                raise ValueError(f"a layout is 1, cfgN, ulyssesN or cfgNxulyssesN, got {name!r}")
    return cfg, ulysses, decode == ""


def run_layouts(args: argparse.Namespace) -> int:
    """Each layout's engine started cold, then warm from the cold start's compile cache; one request at a
    time at each tier in the warm start, and its frames against one GPU's for the same seed. DIR/layouts.json."""
    import subprocess

    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "layouts": {}, "errors": []}
    out_file = args.out / "layouts.json"
    model_dir, report["save_s"] = saved_model(args)
    # Each layout's frames of one request (the same seed everywhere), kept out of DIR: up to 90 MB a tier.
    frames_root = Path(tempfile.mkdtemp(prefix="engine-layout-frames-"))
    gpus = torch.cuda.device_count() if args.device == "cuda" else None
    for name in [n for n in args.layouts.split(",") if n]:
        cfg, ulysses, _ = parse_layout(name)
        if gpus is not None and cfg * ulysses > gpus:
            report["errors"].append(f"{name}: {cfg * ulysses} GPUs needed, {gpus} seen")
            continue
        cache_root = Path(tempfile.mkdtemp(prefix=f"compile-cache-{name}-"))
        frames_dir = frames_root / name
        entry: dict[str, Any] = {}
        report["layouts"][name] = entry
        for start in ("cold",) if args.one_start else ("cold", "warm"):
            command = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]]
            command += ["--probe-layout", name, "--probe-model", str(model_dir), "--probe-cache", str(cache_root)]
            if start == "warm" or args.one_start:
                command += ["--probe-measure", "--probe-frames", str(frames_dir)]
            log_path = args.out / f"layout-{name}-{start}.log"
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0"}
            launched = time.time()
            with log_path.open("w") as log_file:
                child = subprocess.Popen(
                    command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
                )
                try:
                    child.wait(timeout=args.probe_timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, 9)  # the probe and its follower ranks
                    child.wait()
            lines = [line for line in log_path.read_text().splitlines() if line.startswith("PROBE_RESULT ")]
            if not lines:
                report["errors"].append(f"{name} {start}: exit {child.returncode}, see {log_path.name}")
                out_file.write_text(json.dumps(report, indent=2))
                break
            result = json.loads(lines[-1].removeprefix("PROBE_RESULT "))
            closed = [line for line in log_path.read_text().splitlines() if line.startswith("PROBE_CLOSED ")]
            result["close_s"] = json.loads(closed[-1].removeprefix("PROBE_CLOSED "))["close_s"] if closed else None
            result["start_to_ready_s"] = round(result.pop("ready_unix") - launched, 1)
            result["exit_status"] = child.returncode
            entry[start] = result
            out_file.write_text(json.dumps(report, indent=2))
            print(f"{name} {start}: ready in {result['start_to_ready_s']} s (cache warm: {result['cache_warm']})")
    report["summary"] = summarise_layouts(report["layouts"])
    for name, row in report["summary"].items():
        if name != "1":
            row["frames_vs_one_gpu"] = compare_frames(frames_root / "1", frames_root / name)
    out_file.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["summary"], indent=1))
    if report["errors"]:
        print("errors:", report["errors"])
    return 0


def compare_frames(reference_dir: Path, other_dir: Path) -> dict[str, Any]:
    """Per tier, how far a layout's frames are from one GPU's for the same request (uint8 levels, and PSNR
    in dB): the parallel paths add and multiply in other orders, so bf16 rounding differs, nothing more."""
    import numpy as np

    compared: dict[str, Any] = {}
    for path in sorted(other_dir.glob("*.npy")):
        reference = reference_dir / path.name
        if not reference.exists():
            continue
        expected, got = np.load(reference).astype(np.int16), np.load(path).astype(np.int16)
        if expected.shape != got.shape:
            compared[path.stem] = {"error": f"shape {got.shape} against {expected.shape}"}
            continue
        difference = np.abs(got - expected)
        mse = float(np.mean(difference.astype(np.float64) ** 2))
        compared[path.stem] = {
            "mean_abs": round(float(difference.mean()), 3),
            "max_abs": int(difference.max()),
            "share_over_8": round(float((difference > 8).mean()), 5),
            "psnr_db": round(10 * np.log10(255**2 / mse), 2) if mse else None,
        }
    return compared


def summarise_layouts(layouts: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    one_gpu = layouts.get("1") or {}
    one = (one_gpu.get("warm") or one_gpu.get("cold") or {}).get("latency_s") or {}
    for name, entry in layouts.items():
        cold = entry.get("cold") or {}
        warm = entry.get("warm") or (cold if "latency_s" in cold else {})  # --one-start: measured cold
        row: dict[str, Any] = {
            "start_to_ready_cold_s": cold.get("start_to_ready_s"),
            "start_to_ready_warm_s": (entry.get("warm") or {}).get("start_to_ready_s"),
            "latency_s": warm.get("latency_s"),
            "stages": warm.get("stages"),
            "close_s": [cold.get("close_s"), (entry.get("warm") or {}).get("close_s")],
        }
        if one and name != "1":
            row["latency_vs_one_gpu"] = {
                tier: round(latency / one[tier], 3)
                for tier, latency in (warm.get("latency_s") or {}).items()
                if one.get(tier)
            }
        summary[name] = row
    return summary


def start_probe(args: argparse.Namespace) -> int:
    """One engine start of a layout (a process of its own): load, warm each tier at batch 1, report when it
    was ready; with --probe-measure, then one request at a time at each tier. Prints PROBE_RESULT {json}."""
    from studio.engine.gpu.compile_cache import CompileCache, cache_key
    from studio.engine.parallel import ParallelSettings

    cfg, ulysses, split_decode = parse_layout(args.probe_layout)
    tiers = [t for t in args.tiers.split(",") if t]
    sizes = [(*TIERS[tier], args.frames) for tier in tiers]
    options = {
        "compile": args.compile,
        "compile_mode": args.compile_mode,
        "attention_backend": args.attention_backend,
        "cuda_graphs": not args.no_cuda_graphs,
        "fused_kernels": not args.no_fused_kernels,
        "tune_kernels": args.tune_kernels,
        "cfg_parallel_size": cfg,
        "ulysses_degree": ulysses,
    }
    cache = CompileCache(Path(args.probe_cache), cache_key(args.probe_model, args.device, sizes, 1, options))
    started = time.perf_counter()
    generator = VideoGenerator(
        args.probe_model,
        device=args.device,
        compile=args.compile,
        compile_mode=args.compile_mode,
        attention_backend=args.attention_backend,
        cuda_graphs=not args.no_cuda_graphs,
        fused_kernels=not args.no_fused_kernels,
        tune_kernels=args.tune_kernels,
        parallel=ParallelSettings(cfg, ulysses, split_decode=split_decode),
        compile_cache=cache,
    )
    generator.load()
    loaded = time.perf_counter()
    warmup = generator.warmup(sizes, max_batch=1)
    result: dict[str, Any] = {
        "ready_unix": time.time(),
        "layout": {"cfg_parallel_size": cfg, "ulysses_degree": ulysses, "split_decode": split_decode},
        "cache_warm": cache.warm,
        "load_s": round(loaded - started, 2),
        "warmup_s": round(time.perf_counter() - loaded, 2),
        "warmup": warmup,
        "attention_backend": generator.gpu.attention_backend,
        "kernels": generator.gpu.kernels,
        "cuda_graphs": generator.gpu.graphs.captured if generator.gpu.graphs is not None else 0,
        "compiled_graphs": compiled_graphs(),
    }
    if args.probe_measure:
        manager = JobManager(
            generator,
            Path(tempfile.mkdtemp(prefix="engine-layout-")),
            "bench",
            EngineMetrics("bench"),
            max_batch=1,
            encode_workers=8 if args.device == "cuda" else 0,
        )
        manager.start()
        result["latency_s"], result["latencies_s"], result["stages"] = {}, {}, {}
        result["first_request_s"], result["peak_gib"] = {}, {}
        for tier in tiers:
            peak_reset(args.device)
            first_s, _ = submit_and_wait(manager, engine_params(args, tier, 999))
            latencies = []
            for i in range(max(1, args.repeats - 1)):
                latency, job = submit_and_wait(manager, engine_params(args, tier, 1000 + i))
                if job.status != "completed":
                    raise RuntimeError(f"engine job failed: {job.error}")
                latencies.append(latency)
                result["stages"][tier] = job.record().stage_durations
            result["first_request_s"][tier] = round(first_s, 3)
            result["latencies_s"][tier] = [round(x, 3) for x in latencies]
            result["latency_s"][tier] = round(statistics.median(latencies), 3)
            result["peak_gib"][tier] = peak_gib(args.device)
        result["compiled_graphs_during_requests"] = compiled_graphs() - result["compiled_graphs"]
        if generator.gpu.graphs is not None:
            result["cuda_graph_replays"] = generator.gpu.graphs.replays
        manager.shutdown()
        if args.probe_frames:
            # The frames of the first request once more, straight from the generator, for the parent to
            # compare across layouts (the mp4 would add the encoder's own differences).
            import numpy as np

            frames_dir = Path(args.probe_frames)
            frames_dir.mkdir(parents=True, exist_ok=True)
            for tier in tiers:
                np.save(frames_dir / f"{tier}.npy", generator.generate(engine_params(args, tier, 999)).frames)
    print("PROBE_RESULT " + json.dumps(result, default=str), flush=True)
    # Out before the engine stops: the figures do not depend on it. How long stopping its ranks takes is a
    # figure of its own.
    closing = time.perf_counter()
    generator.close()
    print("PROBE_CLOSED " + json.dumps({"close_s": round(time.perf_counter() - closing, 2)}), flush=True)
    # The JobManager's worker is a daemon thread that shutdown does not join: an interpreter ending under it
    # aborts at times, after the result is out. This process has nothing else to finish.
    sys.stderr.flush()
    os._exit(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "report")))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny model and 2 steps: checks the script only")
    parser.add_argument("--tiers", default="256p,480p")
    parser.add_argument("--frames", type=int, default=189, help="Cosmos 3's clip length by default")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--guidance", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3, help="timed requests at concurrency 1 (480p: one fewer)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--per-client", type=int, default=3, help="requests per client at concurrency 8")
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--batch-wait-ms", type=float, default=200.0)
    parser.add_argument("--compile", default="auto")
    parser.add_argument("--compile-mode", default=None)
    parser.add_argument("--attention-backend", default="auto")
    parser.add_argument("--no-cuda-graphs", action="store_true", help="the engine without CUDA graphs")
    parser.add_argument("--no-fused-kernels", action="store_true", help="the engine without its own kernels")
    parser.add_argument(
        "--tune-kernels",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the compiler times its fused kernels' block sizes at warm-up (the engine's default)",
    )
    parser.add_argument("--cache-restart", action="store_true", help="time a second warm-up from the compile cache")
    parser.add_argument("--replicas", type=int, default=0, help="engine servers, one per GPU, behind the router")
    parser.add_argument("--replica-requests", type=int, default=32)
    parser.add_argument("--replica-concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--layouts",
        default="",
        help="one request on several GPUs: 1, cfg2, ulysses2, cfg2xulysses2, each with -decode0 for rank 0 "
        "decoding alone (comma-separated)",
    )
    parser.add_argument(
        "--one-start",
        action="store_true",
        help="with --layouts: one start per layout, measured (no warm restart from its compile cache)",
    )
    parser.add_argument("--probe-timeout", type=float, default=900.0, help="seconds one layout's start may take")
    # One layout's engine start, as --layouts runs it in a process of its own.
    parser.add_argument("--probe-layout", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-cache", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe-measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe-frames", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.steps = min(args.steps, 2)
        args.repeats = min(args.repeats, 2)
        args.per_client = 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stdout)
    for noisy in ("httpx", "diffusers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.probe_layout:
        return start_probe(args)
    if args.layouts:
        return run_layouts(args)
    if args.replicas:
        return run_replicas(args)
    tiers = [t for t in args.tiers.split(",") if t]
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "errors": []}

    def save() -> None:
        (args.out / "engine_gpu.json").write_text(json.dumps(report, indent=2, default=str))

    def phase(name: str, fn: Any) -> Any:
        started = time.perf_counter()
        try:
            value = fn()
        except Exception as exc:
            traceback.print_exc()
            report["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
            value = None
        report.setdefault("phase_seconds", {})[name] = round(time.perf_counter() - started, 2)
        log.info("phase %s: %.1f s", name, time.perf_counter() - started)
        save()
        return value

    import diffusers

    report["env"] = {
        "torch": torch.__version__,
        "diffusers": diffusers.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
    }
    burst = matmul_rate_burst(args.device)
    report["bf16_matmul_tflops_burst"] = round(burst / 1e12, 1) if burst == burst else None
    rate = matmul_rate(args.device)
    report["bf16_matmul_tflops_start"] = round(rate / 1e12, 1) if rate == rate else None
    pipe, build_s = build_pipeline(args.device, args.smoke)
    report["model"] = {
        "build_s": build_s,
        "transformer_params": parameters(pipe.transformer),
        "text_encoder_params": parameters(pipe.text_encoder),
        "vae_params": parameters(pipe.vae),
    }
    report["model"]["text_encode_s"] = phase("text encoder cost", lambda: text_encoder_cost(pipe, args.device))
    flops = {tier: transformer_flops(pipe, *TIERS[tier], args.frames, args.device) for tier in tiers}
    report["transformer_tflop_per_sample_forward"] = {k: round(v / 1e12, 3) for k, v in flops.items()}
    timer = ForwardTimer(pipe.transformer, args.device)
    save()

    # Baseline first: the engine's settings (attention kernel, cuDNN autotuner, compiled blocks) change the
    # shared modules afterwards.
    report["vae_decode_s_default"] = phase(
        "vae probe (default)", lambda: vae_decode_probe(pipe, args.device, tiers, args.frames)
    )
    report["baseline"] = {}
    for tier in tiers:
        report["baseline"][tier] = phase(
            f"baseline {tier}", lambda tier=tier: run_baseline(pipe, args, tier, timer, flops[tier], rate)
        )

    generator = VideoGenerator(
        "wan2.1-t2v-1.3b-random",
        device=args.device,
        compile=args.compile,
        compile_mode=args.compile_mode,
        attention_backend=args.attention_backend,
        cuda_graphs=not args.no_cuda_graphs,
        fused_kernels=not args.no_fused_kernels,
        tune_kernels=args.tune_kernels,
    )
    phase("engine load", lambda: generator.load(pipeline=pipe))
    report["engine_config"] = {
        "compile": generator.gpu.compile if args.device == "cuda" else "off",
        "compile_mode": generator.gpu.compile_mode,
        "attention_backend": generator.gpu.attention_backend,
        "batched_loop": generator.batched_loop,
        "fused_qkv": generator.gpu.fused_qkv,
        "kernels": generator.gpu.kernels,
        "tune_kernels": generator.gpu.tune_kernels,
        "max_batch": args.max_batch,
        "batch_wait_ms": args.batch_wait_ms,
    }
    sizes = [(*TIERS[tier], args.frames) for tier in tiers]
    started = time.perf_counter()
    report["warmup_s"] = phase("engine warm-up", lambda: generator.warmup(sizes, max_batch=args.max_batch))
    report["startup_warmup_total_s"] = round(time.perf_counter() - started, 2)
    report["engine_config"]["vae_channels_last"] = generator.vae_channels_last
    report["engine_config"]["cuda_graphs"] = generator.gpu.graphs.captured if generator.gpu.graphs is not None else 0
    if generator.gpu.graphs is not None:
        generator.gpu.graphs = TimedGraphs(generator.gpu.graphs, timer)
    manager = JobManager(
        generator,
        Path(tempfile.mkdtemp(prefix="engine-gpu-")),
        "bench",
        EngineMetrics("bench"),
        max_batch=args.max_batch,
        batch_wait_ms=args.batch_wait_ms,
        encode_workers=8 if args.device == "cuda" else 0,
    )
    manager.start()
    report["compiled_graphs_after_warmup"] = compiled_graphs()
    report["engine"] = {}
    for tier in tiers:
        report["engine"][tier] = {
            "c1": phase(
                f"engine {tier} c1", lambda tier=tier: run_engine_c1(manager, args, tier, timer, flops[tier], rate)
            )
        }
    if "256p" in tiers:
        report["engine"]["256p"][f"c{args.concurrency}"] = phase(
            f"engine 256p c{args.concurrency}",
            lambda: run_engine_closed_loop(manager, args, "256p", args.concurrency, args.per_client),
        )
    # Graphs compiled while requests ran: 0 means no request waited for a compile.
    report["compiled_graphs_during_requests"] = compiled_graphs() - report["compiled_graphs_after_warmup"]
    if args.cache_restart and args.device == "cuda":

        def rewarm() -> dict[str, float]:
            torch.compiler.reset()
            started = time.perf_counter()
            generator.warmup(sizes, max_batch=args.max_batch)
            return {"total_s": round(time.perf_counter() - started, 2)}

        report["warmup_from_cache"] = phase("warm-up from the compile cache", rewarm)
    manager.shutdown()
    if generator.gpu.graphs is not None:
        report["engine_config"]["cuda_graph_replays"] = generator.gpu.graphs.replays
    # The rate again with the GPU warm; MFU is against the highest measured (the stricter figure), the burst
    # rate of an idle GPU as a rule (the reference rate is such a figure).
    end_rate = matmul_rate(args.device)
    if end_rate == end_rate:
        report["bf16_matmul_tflops_end"] = round(end_rate / 1e12, 1)
        best = max(rate, end_rate, burst)
        report["bf16_matmul_tflops"] = round(best / 1e12, 1)
        for side in ("baseline", "engine"):
            for cell in (report.get(side) or {}).values():
                cell = (cell or {}).get("c1", cell) if side == "engine" else cell
                if cell and cell.get("transformer_tflops"):
                    cell["mfu"] = round(cell["transformer_tflops"] * 1e12 / best, 4)
    report["summary"] = summarise(report, tiers, args.concurrency)
    save()
    print_table(report)
    return 0


def summarise(report: dict[str, Any], tiers: list[str], concurrency: int) -> dict[str, Any]:
    base, eng = report.get("baseline") or {}, report.get("engine") or {}
    summary: dict[str, Any] = {}
    for tier in tiers:
        b, e = base.get(tier) or {}, (eng.get(tier) or {}).get("c1") or {}
        if b.get("latency_s") and e.get("latency_s"):
            summary[f"latency_ratio_{tier}"] = round(e["latency_s"] / b["latency_s"], 3)
        summary[f"mfu_baseline_{tier}"] = b.get("mfu")
        summary[f"mfu_engine_{tier}"] = e.get("mfu")
    loop = (eng.get("256p") or {}).get(f"c{concurrency}") or {}
    b256 = base.get("256p") or {}
    if loop.get("throughput_videos_per_s") and b256.get("throughput_videos_per_s"):
        summary["throughput_ratio_c8_256p"] = round(
            loop["throughput_videos_per_s"] / b256["throughput_videos_per_s"], 3
        )
    summary["bars"] = BARS
    return summary


def print_table(report: dict[str, Any]) -> None:
    print()
    print(f"bf16 matmul: {report.get('bf16_matmul_tflops')} TFLOP/s; warm-up: {report.get('startup_warmup_total_s')} s")
    for tier, b in (report.get("baseline") or {}).items():
        e = ((report.get("engine") or {}).get(tier) or {}).get("c1") or {}
        print(
            f"{tier}: baseline {b and b.get('latency_s')} s (mfu {b and b.get('mfu')}), "
            f"engine {e.get('latency_s')} s (mfu {e.get('mfu')}), peak {e.get('peak_gib')} GiB"
        )
    print(json.dumps(report.get("summary"), indent=1))
    if report.get("errors"):
        print("errors:", report["errors"])


if __name__ == "__main__":
    raise SystemExit(main())
