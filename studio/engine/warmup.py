"""Warm-up: each size at each batch size requests will run at, so that no request waits for a compile; then
the CUDA graphs of the shapes seen, and one replay of each size. A warm-up that fails on a GPU turns compile
and the attention backend off rather than fail requests later. What it compiled and picked is then kept in
the compile cache, for the next start.

The runs come in two parts. Before the server answers: every size at batch 1, its graphs and one replay, so
that a request of any warmed size is served at once. The larger batch sizes follow one run at a time while
the server has nothing queued (`Warmup.run_next`, called by the job manager's worker), and a batch of a size
never grows past the largest batch size warmed so far (`batch_limit`): a request waits at most for the one
warm-up run in progress, never for a compile of its own. `run_all` does both parts at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from studio.engine.generation_types import BatchItem, DecodeSkipped, GenerationOutput, GenerationParams, ResultCallback
from studio.engine.vae_decode import decode_chunk, decode_group_sizes, pick_vae_memory_format

if TYPE_CHECKING:
    from studio.engine.batching import BatchBuckets
    from studio.engine.gpu.gpu_setup import GpuSetup

log = logging.getLogger(__name__)

# Steps of a warm-up run: one compiles the transformer at the run's shape and records it for its CUDA graph;
# the second runs the scheduler's multistep update once.
WARMUP_STEPS = 2
# Prompts of the warm-up runs start so; their embeddings are dropped from the cache after it.
WARMUP_PROMPT = "warm-up"

Size = tuple[int, int, int]  # width, height, frames


def parse_sizes(text: str) -> list[Size]:
    """`"320x192x33,832x480x33"` -> [(320, 192, 33), (832, 480, 33)] (width x height x frames)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            width, height, frames = (int(value) for value in part.lower().split("x"))
        except ValueError:
            raise ValueError(f"a warm-up size looks like WIDTHxHEIGHTxFRAMES (e.g. 320x192x33), got {part!r}") from None
        sizes.append((width, height, frames))
    return sizes


def _compile_counters() -> Counter[str]:
    """torch.compile's cache hits and misses so far in this process (FX graphs, AOT graphs)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # a torch without dynamo: nothing compiles
        return Counter()
    inductor = counters["inductor"]
    names = ("fxgraph_cache_hit", "fxgraph_cache_miss", "aot_autograd_cache_hit", "aot_autograd_cache_miss")
    return Counter({name: inductor[name] for name in names})


class WarmedGenerator(Protocol):
    """What a warm-up drives: rank 0's generator (studio.engine.generator.VideoGenerator), which tells its other
    ranks each call that changes what they run."""

    device: str
    pipe: Any
    gpu: GpuSetup
    buckets: BatchBuckets
    vae_channels_last: bool | None  # None: not picked yet
    warmup_seconds: dict[str, float]  # what each run took, by name

    @property
    def batched_loop(self) -> bool: ...

    def on_device_thread(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def native_size(self, width: int, height: int) -> tuple[int, int]: ...

    def set_max_batch(self, max_batch: int) -> None: ...

    def set_vae_layout(self, channels_last: bool) -> None: ...

    def record_shapes(self) -> None: ...

    def capture_graphs(self) -> int: ...

    def fall_back_to_eager(self) -> None: ...

    def generate(self, params: GenerationParams) -> GenerationOutput: ...

    def generate_batch(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None: ...

    def forget_prompts(self, prefix: str) -> None: ...

    def save_compile_cache(self) -> None: ...


class Warmup:
    """The warm-up of one engine start: `sizes` at every batch size up to `max_batch`. Runs on the
    generator's device thread (its methods hand themselves over)."""

    def __init__(self, generator: WarmedGenerator, sizes: Sequence[Size], max_batch: int = 1):
        self.generator = generator
        self.sizes = list(sizes)
        self.max_batch = max(1, max_batch)
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._warmed: dict[tuple[tuple[int, int], int], int] = {}  # (native size, frames) -> largest batch warmed
        self._decoded: set[tuple[tuple[int, int], int, int]] = set()  # decode shapes run: size, frames, group
        self._later: list[tuple[Size, int]] = []
        self.runs_done = 0
        self.runs_total = 0
        self.complete = False
        self.failed: str | None = None

    # --- what requests may do meanwhile ----------------------------------------------------------------

    def batch_limit(self, params: GenerationParams) -> int:
        """The largest batch of this request's shape that runs without a compile now; `max_batch` for a
        shape the warm-up does not make (it compiles at its first request, as it would without a warm-up)."""
        if self.complete or not self.generator.batched_loop:
            return self.max_batch
        key = (self.generator.native_size(params.width, params.height), params.num_frames)
        with self._lock:
            return self._warmed.get(key, self.max_batch)

    @property
    def pending(self) -> bool:
        return not self.complete and self.failed is None and bool(self._later)

    def status(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "runs_done": self.runs_done,
            "runs_total": self.runs_total,
            "failed": self.failed,
        }

    # --- the runs --------------------------------------------------------------------------------------

    def run_all(self) -> dict[str, float]:
        """Every run before returning (a benchmark, or a server told not to warm in the background); a run that
        fails raises, as it would before serving."""
        self.before_serving()
        while self.pending:
            self.generator.on_device_thread(self._run_next_here)
        return dict(self.generator.warmup_seconds)

    def before_serving(self) -> dict[str, float]:
        """Each size at batch 1, its CUDA graphs and one replay; the other batch sizes are left for later."""
        return self.generator.on_device_thread(self._before_serving_here)

    def run_next(self) -> bool:
        """One of the runs left; after the last, their CUDA graphs and the compile cache. False: none left."""
        if not self.pending:
            return False
        try:
            return self.generator.on_device_thread(self._run_next_here)
        except Exception as exc:  # the worker that calls this serves requests too: it must not die of it
            self.failed = f"{type(exc).__name__}: {exc}"
            log.exception("the warm-up stopped: batches stay at the sizes warmed so far")
            return False

    def _before_serving_here(self) -> dict[str, float]:
        generator = self.generator
        if not generator.batched_loop:
            self.complete = True
            return {}
        generator.set_max_batch(self.max_batch)
        gpu = generator.gpu
        if generator.device == "cuda" and self.sizes:
            layout = generator.vae_channels_last  # picked by an earlier start here (the compile cache) or now
            if layout is None:
                width, height, frames = max(self.sizes, key=lambda size: size[0] * size[1] * size[2])
                layout = pick_vae_memory_format(generator.pipe, *generator.native_size(width, height), frames)
            generator.set_vae_layout(layout)  # on every rank: each decodes a strip of the frames
        later: list[tuple[Size, int]] = []
        for size in self.sizes:
            batches = set(generator.buckets.sizes) if gpu.static_shapes else {1, self.max_batch}
            chunk = decode_chunk(size[2], *generator.native_size(size[0], size[1]))
            batches |= set(decode_group_sizes(self.max_batch, chunk))
            later += [(size, batch) for batch in sorted(batches) if 1 < batch <= self.max_batch]
        # The smaller batch sizes of every size first: the most capacity soonest.
        self._later = sorted(later, key=lambda run: (run[1], self.sizes.index(run[0])))
        self.runs_total = len(self.sizes) + len(self._later)
        generator.record_shapes()
        for size in self.sizes:
            self._run(size, 1)
        self._capture_graphs(replay=True)
        if not self._later:
            self._finish()
        else:
            generator.save_compile_cache()  # a server stopped before the rest keeps what was compiled so far
        return dict(generator.warmup_seconds)

    def _run_next_here(self) -> bool:
        if not self.pending:
            return False
        size, batch = self._later.pop(0)
        self.generator.record_shapes()
        try:
            self._run(size, batch)
            self._capture_graphs(replay=False)
        except Exception:
            graphs = self.generator.gpu.graphs
            if graphs is not None:
                graphs.recording = False  # requests from now on are not warm-up shapes
            raise
        if not self._later:
            self._finish()
        return True

    def _run(self, size: Size, batch: int) -> None:
        generator = self.generator
        width, height, frames = size
        native = generator.native_size(width, height)
        items = [
            BatchItem(GenerationParams(f"{WARMUP_PROMPT} {i}", width, height, frames, WARMUP_STEPS, 5.0, seed=i))
            for i in range(batch)
        ]
        # A decode call of a shape decoded before has nothing left to warm: those rows are not decoded.
        row = 0
        for group in decode_group_sizes(batch, decode_chunk(frames, *native)):
            shape = (native, frames, group)
            if shape in self._decoded:
                for item in items[row : row + group]:
                    item.decode = False
            self._decoded.add(shape)
            row += group
        started, before = time.perf_counter(), _compile_counters()
        try:
            generator.generate_batch(items, _raise_if_failed)
        except Exception as exc:
            gpu = generator.gpu
            if generator.device != "cuda" or (gpu.compile == "off" and gpu.attention_backend is None):
                raise
            # A kernel or compile that fails here would fail requests: serve eager, default attention.
            log.warning("warm-up failed (%s: %s); compile and attention backend off", type(exc).__name__, exc)
            generator.fall_back_to_eager()
            generator.generate_batch(items, _raise_if_failed)
        if generator.device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        compiles = {name: count for name, count in (_compile_counters() - before).items() if count}
        generator.warmup_seconds[f"{width}x{height}x{frames} batch {batch}"] = round(seconds, 2)
        with self._lock:
            self._warmed[(native, frames)] = batch
            self.runs_done += 1
        log.info("warm-up %dx%dx%d batch %d: %.1f s %s", width, height, frames, batch, seconds, compiles or "")

    def _capture_graphs(self, replay: bool) -> None:
        generator = self.generator
        if generator.gpu.graphs is None:
            return
        started = time.perf_counter()
        held = generator.capture_graphs()
        seconds = time.perf_counter() - started
        generator.warmup_seconds["cuda graphs"] = round(generator.warmup_seconds.get("cuda graphs", 0) + seconds, 2)
        log.info("CUDA graphs of the transformer: %d, captured in %.1f s", held, seconds)
        if held and replay:
            self._replay_once()

    def _replay_once(self) -> None:
        """One request of each size through the captured graphs before serving: whatever a graph's first
        replays still cost is paid here, not by the first user."""
        generator = self.generator
        for width, height, frames in self.sizes:
            started = time.perf_counter()
            params = GenerationParams(f"{WARMUP_PROMPT} replay", width, height, frames, WARMUP_STEPS, 5.0, seed=0)
            output = generator.generate(params)
            torch.cuda.synchronize()
            stages = {k: round(v, 3) for k, v in output.stage_durations.items()}
            seconds = round(time.perf_counter() - started, 2)
            generator.warmup_seconds[f"{width}x{height}x{frames} replay"] = seconds
            log.info("warm-up replay %dx%dx%d: %.2f s %s", width, height, frames, seconds, stages)

    def _finish(self) -> None:
        # The empty negative prompt stays: most requests use it.
        self.generator.forget_prompts(f"{WARMUP_PROMPT} ")
        self.generator.save_compile_cache()
        self.complete = True
        if self.runs_total > len(self.sizes):
            log.info(
                "warm-up complete: %d runs, every batch size up to %d, %.1f s after it began",
                self.runs_done,
                self.max_batch,
                time.perf_counter() - self.started,
            )


def _raise_if_failed(_index: int, result: GenerationOutput | BaseException) -> None:
    if isinstance(result, BaseException) and not isinstance(result, DecodeSkipped):
        raise result
