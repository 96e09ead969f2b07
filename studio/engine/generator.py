"""`VideoGenerator`: one diffusers text-to-video pipeline on one device, making one batch of videos at a time.

Wan-style pipelines run through the engine's own batched denoising loop (studio.engine.denoise), with text
embeddings cached and, on a GPU, the transformer set up for speed (studio.engine.gpu.gpu_setup: the engine's
kernels, compiled blocks for static shapes, CUDA graphs per warmed shape); the VAE decodes one latent frame at
a time and hands the frames over for encoding as it goes (studio.engine.vae_decode). Any other pipeline runs
through its plain `__call__`, one request at a time (studio.engine.plain_call). On a GPU everything that runs
the model runs on one device thread.

One request may run on several ranks (studio.engine.parallel: guidance halves and token shares on a GPU each);
the generator of rank 0 starts the others, and every call that changes what the transformer runs is made on
all of them, in one order. What start-up compiles and picks is kept across starts (studio.engine.gpu.compile_cache).

Previews are made on rank 0 alone (studio.engine.preview_device): from the latents, through a latent RGB map that
fits the loaded VAE (studio.engine.latent_rgb: found by its fingerprint, or fitted at load and kept in the compile
cache's folder), or from a pixel-space pipeline's own estimate of its frames.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from studio.engine import batching, vae_fused, warmup
from studio.engine.batching import BatchBuckets
from studio.engine.denoise import BatchedDenoiser, TransformerForward
from studio.engine.device_thread import DeviceThread
from studio.engine.generation_types import BatchItem, GenerationOutput, GenerationParams, ModelLoadError, ResultCallback
from studio.engine.gpu.attention import SDPA_KERNEL_OF_BACKEND
from studio.engine.gpu.compile_cache import CompileCache
from studio.engine.gpu.flash3 import Flash3Unavailable
from studio.engine.gpu.fp8 import Fp8Options, Fp8Unavailable, fp8_available
from studio.engine.gpu.gpu_setup import OWN_ATTENTION, GpuSetup
from studio.engine.gpu.sage import SageUnavailable
from studio.engine.latent_rgb import LatentRgbMap, map_for_vae
from studio.engine.loader import PipelineFacts, from_pretrained, set_up_device
from studio.engine.parallel.leader import FollowerLost, start_leader
from studio.engine.parallel.rank import ParallelRank
from studio.engine.parallel.sequence import SequenceParallel
from studio.engine.parallel.settings import ParallelSettings
from studio.engine.plain_call import generate_plain
from studio.engine.preview_device import DevicePreviews
from studio.engine.previews import PreviewEncoder
from studio.engine.prompts import PromptEmbeddings
from studio.engine.vae_decode import conv_weights_channels_last

log = logging.getLogger(__name__)

# Seconds `close` waits for a batch in progress before it stops the other ranks regardless.
CLOSE_WAIT_S = 60.0


class VideoGenerator:
    """Owns one diffusers pipeline on one device and runs one batch of generations at a time.

    `parallel`: run each request on `parallel.world_size` ranks (this generator is rank 0 and starts the
    others at load; the model must then be a directory each rank loads). `rank`: a follower's rank, already
    joined (studio.engine.parallel.follower_main makes these). `compile_cache`: where start-up work is kept.
    `fp8_options`: how fp8 runs where `quantization` asks for it (the defaults are what it serves)."""

    def __init__(
        self,
        model: str,
        device: str = "auto",
        threads: int | None = None,
        compile: str = "auto",
        compile_mode: str | None = None,
        attention_backend: str = "auto",
        text_cache_size: int = 64,
        cuda_graphs: bool = True,
        fused_kernels: bool = True,
        tune_kernels: bool = True,
        parallel: ParallelSettings | None = None,
        rank: ParallelRank | None = None,
        compile_cache: CompileCache | None = None,
        quantization: str = "none",
        fp8_options: Fp8Options = Fp8Options(),
    ):
        self.model = model
        self.device, self.dtype = set_up_device(device, threads)
        self.threads = threads or 0  # 0: no budget (torch and the encoder use every core)
        self.gpu = GpuSetup(
            self.device,
            compile,
            compile_mode,
            attention_backend,
            cuda_graphs,
            fused_kernels,
            tune_kernels,
            quantization,
            fp8_options,
        )
        # What each follower rank is made with (the same settings: every rank compiles the same graphs).
        self._options: dict[str, Any] = {
            "threads": threads,
            "compile": compile,
            "compile_mode": compile_mode,
            "attention_backend": attention_backend,
            "text_cache_size": text_cache_size,
            "cuda_graphs": cuda_graphs,
            "fused_kernels": fused_kernels,
            "tune_kernels": tune_kernels,
            "quantization": quantization,
            "fp8_options": fp8_options,
        }
        self.prompts = PromptEmbeddings(text_cache_size)
        self.buckets = BatchBuckets()
        self.pipe: Any = None
        self.facts: PipelineFacts | None = None  # read off the pipeline at load
        self.vae_channels_last: bool | None = None  # decided by measurement at warm-up on a GPU
        self.fused_vae = False  # the VAE decodes through studio.engine.vae_fused (on a GPU, with the kernels)
        self.warmup_seconds: dict[str, float] = {}
        self.parallel = parallel if parallel is not None and parallel.enabled else None
        self.rank = rank
        self.compile_cache = compile_cache
        self.sequence: SequenceParallel | None = None  # Ulysses in the transformer, with a sequence group
        self.previews: DevicePreviews | None = None  # rank 0's, once loaded
        self._denoise: BatchedDenoiser | None = None
        # Calls the other ranks must make too are told in the order they run here.
        self._rank_lock = threading.RLock()
        spread = self.parallel is not None or rank is not None
        cuda_index = (rank.layout.rank if rank is not None else 0) if spread else None
        self._device_thread = DeviceThread(self.device == "cuda", cuda_index)

    @property
    def batched_loop(self) -> bool:
        """Whether the engine's own (batching) denoising loop drives this pipeline."""
        return self.facts is not None and self.facts.batched_loop

    def on_device_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._device_thread.run(fn, *args)

    # --- loading -----------------------------------------------------------------------------------------

    def load(self, pipeline: Any = None) -> None:
        """Load the pipeline from `model`, or take one already built (its modules are moved to the device)."""
        self.on_device_thread(self._load, pipeline)

    def _load(self, pipeline: Any = None) -> None:
        started = time.perf_counter()
        if self.parallel is not None and self.rank is None:
            if pipeline is not None:
                raise ModelLoadError("one request on several ranks needs the model as a directory each rank loads")
            options = {**self._options, "compile_cache": self.compile_cache}
            try:
                self.rank = start_leader(self.parallel, self.model, self.device, VideoGenerator, options)
            except FollowerLost as exc:
                raise ModelLoadError(f"the engine's ranks did not start: {exc}") from exc
        try:
            self._load_here(pipeline)
            if self.rank is not None and self.rank.followers is not None:
                assert self.parallel is not None
                self.rank.followers.expect("ready", self.parallel.start_timeout_s)
        except BaseException as exc:
            self.close()
            if isinstance(exc, FollowerLost):
                raise ModelLoadError(f"the engine's ranks did not start: {exc}") from exc
            raise
        log.info(
            "loaded %s (%s) on %s in %.1f s (batched loop %s, compile %s, attention %s%s)",
            self.model if pipeline is None else type(pipeline).__name__,
            type(self.pipe).__name__,
            self.device,
            time.perf_counter() - started,
            "on" if self.batched_loop else "off",
            self.gpu.compile if self.device == "cuda" else "off",
            self.gpu.attention_backend or "default",
            f", rank {self.rank.layout.rank} of {self.rank.layout.world_size}" if self.rank else "",
        )

    def _load_here(self, pipeline: Any) -> None:
        if pipeline is not None:
            self.pipe = pipeline
        else:
            self.pipe, _ = from_pretrained(self.model, self.dtype)
        self.pipe.to(self.device)
        self.pipe.set_progress_bar_config(disable=True)
        self.facts = PipelineFacts.of(self.pipe)
        if self.rank is not None and not self.facts.batched_loop:
            raise ModelLoadError(
                f"one request on several ranks runs Wan pipelines in the engine's own loop, not {type(self.pipe).__name__}"
            )
        cache = self.compile_cache
        if cache is not None:
            if self.rank is not None and cache.rank != self.rank.layout.rank:
                cache = self.compile_cache = cache.for_rank(self.rank.layout.rank)
            cache.open()
            cache.activate()
        cached_backend, cached_layout = _cached_picks(cache)
        if self.vae_channels_last is None:
            self.vae_channels_last = cached_layout
        forward = TransformerForward(self.pipe)
        if self.gpu.quantization != "none":
            self._check_quantization_runs_here()
        if self.gpu.own_attention is not None:
            self._check_own_attention_runs_here()
        if self.device == "cuda" and self.facts.batched_loop:
            try:
                self.gpu.apply(self.pipe, forward, self.dtype, cached_backend=cached_backend)
            except Fp8Unavailable as exc:
                raise ModelLoadError(f"--quantization fp8: {exc}; start it with --quantization none") from exc
            except (SageUnavailable, Flash3Unavailable) as exc:
                raise ModelLoadError(
                    f"--attention-backend {self.gpu.own_attention}: {exc}; start it with --attention-backend auto"
                ) from exc
        if self.gpu.fused_kernels and getattr(self.pipe, "vae", None) is not None:
            # The VAE decode through the fused walk too (each norm, SiLU and causal join in one Triton kernel where
            # it checks out here, else the norms compiled): faster than the decoder's own forward either way, the
            # kernel most (benchmarks/experiments/vae_decode_gpu.py; benchmarks/RESULTS.md, the VAE decode).
            self.fused_vae = vae_fused.install(self.pipe.vae, compiled=self.gpu.compile != "off", kernel=True)
            if self.fused_vae and not (self.rank is not None and self.rank.splits_decode):
                # The walk's activations are channels-last by construction, so its weights are too: timing the
                # decoder's own forward in both layouts (pick_vae_memory_format) would pick for a path not served.
                self.vae_channels_last = True
        self._install_sequence_parallel()
        if self.rank is None or self.rank.is_leader:
            self.previews = self._make_previews()
        self._denoise = BatchedDenoiser(
            self.pipe, self.facts, self.device, self.prompts, self.buckets, self.gpu, forward, self.rank, self.previews
        )

    def _check_quantization_runs_here(self) -> None:
        """Refuse at load, not ignore, a quantization this device or pipeline cannot run: a user who asked for fp8
        would otherwise measure bf16."""
        assert self.facts is not None
        problem = fp8_available(self.device)
        if problem is None and not self.facts.batched_loop:
            problem = (
                f"fp8 matmuls run Wan pipelines on the engine's own denoising loop, not {type(self.pipe).__name__}"
            )
        if problem is not None:
            raise ModelLoadError(
                f"--quantization {self.gpu.quantization}: {problem}; start it with --quantization none"
            )

    def _check_own_attention_runs_here(self) -> None:
        """Refuse at load, as for fp8, an attention kernel of the engine's own (SageAttention, FlashAttention 3) where
        it cannot run: the engine would serve another kernel under its name."""
        assert self.facts is not None and self.gpu.own_attention is not None
        own = OWN_ATTENTION[self.gpu.own_attention]
        problem = own.problem(self.device)
        if problem is None and not self.facts.batched_loop:
            problem = f"{own.name} runs Wan pipelines on the engine's own loop, not {type(self.pipe).__name__}"
        if problem is not None:
            raise ModelLoadError(
                f"--attention-backend {self.gpu.own_attention}: {problem}; start it with --attention-backend auto"
            )

    @property
    def levers(self) -> dict[str, str]:
        """The server-wide levers in force that change a video's arithmetic (a job's record names them)."""
        return self.gpu.levers

    def _make_previews(self) -> DevicePreviews:
        """Previews of this pipeline: from its latents where its VAE has a latent RGB map (found, or fitted now),
        else only from what a pixel-space pipeline's own call gives."""
        rgb_map: LatentRgbMap | None = None
        vae = getattr(self.pipe, "vae", None)
        if vae is not None and hasattr(vae.config, "z_dim"):
            root = Path(self.compile_cache.root) if self.compile_cache is not None else None
            try:
                rgb_map = map_for_vae(vae, root)
            except Exception as exc:  # the engine serves without latent previews rather than not at all
                log.warning("previews: no latent RGB map for this VAE (%s: %s)", type(exc).__name__, exc)
        # On a GPU the encoder has a thread of its own, so that the device thread never waits for an image; on a
        # CPU the loop's own thread encodes (a millisecond), which costs less than handing it over.
        previews = DevicePreviews(self.device, PreviewEncoder(workers=1 if self.device == "cuda" else 0), rgb_map)
        if rgb_map is not None:
            previews.warm(int(vae.config.z_dim))
        return previews

    def _install_sequence_parallel(self) -> None:
        """Ulysses in the transformer when this rank has a sequence group (again after a fall back to eager,
        which gives the transformer its own attention back)."""
        group = self.rank.sequence_group() if self.rank is not None else None
        if group is None:
            return
        if self.sequence is None:
            self.sequence = SequenceParallel(group)
        self.sequence.install(self.gpu.eager_transformer(self.pipe), self.gpu.attention_kernel)

    def close(self) -> None:
        """Stop the other ranks (rank 0) and leave the ranks' groups; a generator on one rank has nothing to
        close. A batch in progress ends first (its requests cancelled by the caller), up to a bound: a batch
        stuck on a lost rank would never end."""
        locked = self._rank_lock.acquire(timeout=CLOSE_WAIT_S)
        try:
            rank, self.rank = self.rank, None
            if rank is not None:
                # CUDA graphs that captured the ranks' collectives (Ulysses' all-to-all runs inside the
                # transformer) hold on to their communicators: they go first, so leaving the groups need not
                # wait on them.
                if self.gpu.graphs is not None:
                    self.gpu.graphs.disable()
                rank.close()
        finally:
            if locked:
                self._rank_lock.release()

    # --- shapes ------------------------------------------------------------------------------------------

    def native_size(self, width: int, height: int) -> tuple[int, int]:
        """The size the model can make: each side rounded up to the model's multiple."""
        return self._loaded_facts().native_size(width, height)

    def batch_key(self, params: GenerationParams) -> tuple | None:
        """Requests with equal keys can share one denoising loop; None: this request runs alone."""
        return batching.batch_key(self.facts, params) if self.facts is not None else None

    def set_max_batch(self, max_batch: int) -> None:
        """Batch sizes the transformer runs at when shapes are static: powers of two below max_batch, and it."""
        with self._rank_lock:
            self._tell("max_batch", max_batch)
            self.buckets.set_max_batch(max_batch)

    def _loaded_facts(self) -> PipelineFacts:
        if self.facts is None:
            raise RuntimeError("pipeline not loaded")
        return self.facts

    # --- running -----------------------------------------------------------------------------------------

    def generate(
        self,
        params: GenerationParams,
        on_step: Callable[[int, int], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> GenerationOutput:
        """Run one request; `on_step(done, total)` after each step; `should_stop()` cancels at the next step."""
        results: list[GenerationOutput | BaseException] = []
        self.generate_batch([BatchItem(params, on_step, should_stop)], lambda _, result: results.append(result))
        result = results[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def generate_batch(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None:
        """Run requests of one batch key together; `on_result(i, output or exception)` once per item, as soon
        as that item is done (on a GPU, from the device thread). A cancelled item is answered at once and the
        others go on."""
        self.on_device_thread(self._generate_batch_here, items, on_result)

    def _generate_batch_here(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None:
        if self.pipe is None or self.facts is None or self._denoise is None:
            raise RuntimeError("pipeline not loaded")
        if not items:
            return
        if len(items) > 1:
            keys = {self.batch_key(item.params) for item in items}
            if None in keys or len(keys) != 1:
                raise ValueError("generate_batch needs requests with one batch key")
        with self._rank_lock:
            self._generate_batch_locked(items, on_result)

    def _generate_batch_locked(self, items: Sequence[BatchItem], on_result: ResultCallback) -> None:
        assert self.pipe is not None and self.facts is not None and self._denoise is not None
        if self.batch_key(items[0].params) is None:
            if self.sequence is not None:
                # The plain call runs on this rank alone; the others' share of its tokens would never come.
                raise ValueError(
                    "pipeline arguments beyond the engine's own run on one rank; this engine splits each "
                    "request's tokens across ranks"
                )
            item = items[0]
            try:
                result: GenerationOutput | BaseException = generate_plain(
                    self.pipe,
                    self.facts,
                    self.device,
                    item.params,
                    item.on_step,
                    item.should_stop,
                    item.preview,
                    self.previews,
                )
            except Exception as exc:
                result = exc
            on_result(0, result)
            return
        self._denoise(items, on_result)

    # --- start-up ----------------------------------------------------------------------------------------

    def warmup(self, sizes: Sequence[tuple[int, int, int]], max_batch: int = 1) -> dict[str, float]:
        """Run each size (width, height, frames) once at each batch size the transformer and the VAE will see
        (the batch buckets up to max_batch), so that no request waits for a compile; all of it before
        returning (a server warms its larger batch sizes while it serves: studio.engine.warmup). Returns the
        seconds each run took."""
        return warmup.Warmup(self, sizes, max_batch).run_all()

    def fall_back_to_eager(self) -> None:
        """The transformer as diffusers wrote it (no compile, kernels, attention backend or CUDA graphs), on
        every rank (still split across them)."""
        with self._rank_lock:
            self._tell("eager")
            self.gpu.fall_back_to_eager(self.pipe)
            self._install_sequence_parallel()

    # --- calls every rank makes --------------------------------------------------------------------------

    def _tell(self, kind: Any, payload: Any = None) -> None:
        if self.rank is not None:
            self.rank.tell(kind, payload)

    def record_shapes(self) -> None:
        """The transformer's input shapes from now on are the ones worth a CUDA graph (warm-up)."""
        with self._rank_lock:
            self._tell("record_shapes")
            if self.gpu.graphs is not None:
                self.gpu.graphs.recording = True

    def capture_graphs(self) -> int:
        """Capture CUDA graphs of the shapes recorded, on every rank; graphs stay on only where every rank
        holds as many. Returns how many are held."""
        graphs = self.gpu.graphs
        if graphs is None:
            return 0
        with self._rank_lock:
            self._tell("capture_graphs")
            captured = graphs.capture_seen()
            followers = self.rank.followers if self.rank is not None else None
            if followers is not None:
                assert self.parallel is not None
                theirs = followers.expect("captured", self.parallel.start_timeout_s)
                if any(count != captured for count in theirs):
                    log.warning("CUDA graphs held differ across ranks (%d here, %s there): off", captured, theirs)
                    self.graphs_off()
                    captured = 0
            return captured

    def graphs_off(self) -> None:
        with self._rank_lock:
            self._tell("graphs_off")
            if self.gpu.graphs is not None:
                self.gpu.graphs.disable()

    def forget_prompts(self, prefix: str) -> None:
        """Drop the cached embeddings of prompts that start with `prefix`, on every rank."""
        with self._rank_lock:
            self._tell("forget_prompts", prefix)
            self.prompts.forget(lambda text: text.startswith(prefix))

    def cache_choices(self) -> dict[str, Any]:
        """The picks start-up measured, as the compile cache keeps them."""
        choices: dict[str, Any] = {"attention_backend": self.gpu.attention_backend or "default"}
        if self.vae_channels_last is not None:
            choices["vae_channels_last"] = self.vae_channels_last
        return choices

    def save_compile_cache(self) -> None:
        """Keep what start-up compiled and picked, on every rank (after the warm-up)."""
        with self._rank_lock:
            self._tell("save_cache")
            if self.compile_cache is not None:
                self.on_device_thread(self.compile_cache.save, self.cache_choices())

    def set_vae_layout(self, channels_last: bool) -> None:
        """The VAE's convolution weights in channels-last order or not, on every rank."""
        with self._rank_lock:
            self._tell("vae_layout", channels_last)
            self.vae_channels_last = channels_last
            conv_weights_channels_last(self.pipe.vae, channels_last)

    def follow_batch(self, params: Sequence[GenerationParams]) -> None:
        """A follower's part of the leader's batch: the same loop, in step (and its strip of the decode, where
        the ranks split it); nothing to answer."""
        if self._denoise is None:
            raise RuntimeError("pipeline not loaded")
        denoise = self._denoise
        self.on_device_thread(denoise, [BatchItem(p) for p in params], lambda _i, _result: None)


def _cached_picks(cache: CompileCache | None) -> tuple[str | None, bool | None]:
    """The attention kernel and VAE layout an earlier start picked, where the cache holds valid ones."""
    if cache is None or not cache.warm:
        return None, None
    backend, layout = cache.choices.get("attention_backend"), cache.choices.get("vae_channels_last")
    known = {"default", *(name for name in SDPA_KERNEL_OF_BACKEND if name)}
    if backend is not None and backend not in known:
        log.warning("compile cache names an attention kernel this engine does not know (%r): timed afresh", backend)
        backend = None
    if layout is not None and not isinstance(layout, bool):
        log.warning("compile cache holds a VAE layout that is not true or false (%r): timed afresh", layout)
        layout = None
    return backend, layout
