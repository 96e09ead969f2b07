"""How a pipeline's transformer runs on a GPU: one projection for q, k and v, the fastest attention kernel, the
engine's kernels, CUDA graphs of its forward, and torch.compile for static shapes; and the way back to eager."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from studio.engine.gpu import fp8, kernels
from studio.engine.gpu.attention import SDPA_KERNEL_OF_BACKEND, fastest_attention_backend
from studio.engine.gpu.compile_fixes import keep_cached_kernel_tuning
from studio.engine.gpu.flash3 import (
    FLASH3_FP8_SETTING,
    FLASH3_SETTING,
    MAX_FLASH3_FP8_FORWARD_DIFFERENCE,
    Flash3Unavailable,
    flash3_fp8_problem,
    flash3_problem,
)
from studio.engine.gpu.graphs import Forward, GraphedForward
from studio.engine.gpu.sage import MAX_SAGE_FORWARD_DIFFERENCE, SAGE_SETTING, SageUnavailable, sage_problem

log = logging.getLogger(__name__)

COMPILE_CHOICES = ("off", "blocks", "full")


@dataclass(frozen=True)
class OwnAttention:
    """An attention kernel that runs inside the engine's own attention op (not a diffusers backend): its check of
    whether it runs here (None, or why not), the error its refusal raises, its name in messages, how far a
    forward with it may differ from one without, and whether it is a lever (lossy: a job's record names it)."""

    problem: Callable[[str], str | None]
    unavailable: type[RuntimeError]
    name: str
    max_difference: float = kernels.MAX_KERNEL_DIFFERENCE
    lossy: bool = False


OWN_ATTENTION = {
    SAGE_SETTING: OwnAttention(sage_problem, SageUnavailable, "SageAttention", MAX_SAGE_FORWARD_DIFFERENCE, lossy=True),
    FLASH3_SETTING: OwnAttention(flash3_problem, Flash3Unavailable, "FlashAttention 3"),
    FLASH3_FP8_SETTING: OwnAttention(
        flash3_fp8_problem,
        Flash3Unavailable,
        "FlashAttention 3 in fp8",
        MAX_FLASH3_FP8_FORWARD_DIFFERENCE,
        lossy=True,
    ),
}


class GpuSetup:
    """The choices made for the transformer on a GPU (the settings asked for, and what was applied), so that
    they can be reported and undone. Off a GPU nothing is applied."""

    def __init__(
        self,
        device: str,
        compile: str = "auto",
        compile_mode: str | None = None,
        attention_backend: str = "auto",
        cuda_graphs: bool = True,
        fused_kernels: bool = True,
        tune_kernels: bool = True,
        quantization: str = "none",
        fp8_options: fp8.Fp8Options = fp8.Fp8Options(),
    ):
        if compile == "auto":
            compile = "blocks" if device == "cuda" else "off"
        if compile not in COMPILE_CHOICES:
            raise ValueError(f"compile must be auto, off, blocks or full, got {compile!r}")
        self.device = device
        self.compile = compile
        self.compile_mode = compile_mode or None
        # "sage", "flash3", "flash3-fp8": that kernel in the attention the engine's kernels run, the fastest fused kernel for
        # the rest (what the engine's processor leaves to diffusers).
        self.own_attention: str | None = attention_backend if attention_backend in OWN_ATTENTION else None
        self.attention_backend_setting = "auto" if self.own_attention else attention_backend
        self.attention_backend: str | None = None  # what was applied (a diffusers backend name)
        self.cuda_graphs = cuda_graphs and device == "cuda"
        self.graphs: GraphedForward | None = None  # the transformer's forward, replayed as CUDA graphs
        self.fused_kernels = fused_kernels and device == "cuda"
        self.kernels: dict[str, int] = {}  # the engine's kernels put into the transformer, by kind
        self.installed_kernels: kernels.Installed | None = None
        self.tune_kernels = tune_kernels and device == "cuda"
        self.quantization = fp8.parse_quantization(quantization)  # asked for; `fp8` holds what was applied
        self.fp8_options = fp8_options  # how fp8 runs where it is asked for (the defaults: what it serves)
        self.fp8: fp8.Fp8Installed | None = None
        self.fp8_difference: float | None = None  # a small forward's relative RMS difference from bf16
        self.fused_qkv = False
        self.static_shapes = False  # batches are padded to a few sizes (set when the transformer is compiled)
        self._eager_transformer: Any = None  # the transformer before torch.compile wrapped it whole

    def apply(self, pipe: Any, forward: Forward, dtype: torch.dtype, cached_backend: str | None = None) -> None:
        """bf16 is set at load; here: one projection for q, k and v, the fastest attention kernel, and the
        transformer compiled (its repeated blocks, or whole) for static shapes: a graph per size and batch
        bucket, no dynamic-shape kernels. `forward` is the transformer's forward the CUDA graphs capture; `dtype` the
        one the model was loaded in; `cached_backend` the fastest kernel as an earlier start on this machine
        measured it (studio.engine.gpu.compile_cache), which spares the timing."""
        transformer = pipe.transformer
        own = OWN_ATTENTION.get(self.own_attention or "")
        if own is not None and (problem := own.problem(self.device)) is not None:
            raise own.unavailable(problem)
        if hasattr(transformer, "fuse_qkv_projections"):
            try:
                transformer.fuse_qkv_projections()
                self.fused_qkv = True
            except ValueError as exc:  # a model with added K/V projections
                log.info("q/k/v projections stay apart: %s", exc)
        backend = self.attention_backend_setting
        if backend == "auto" and cached_backend:
            backend = cached_backend
            log.info("attention kernel from the compile cache: %s", backend)
        elif backend == "auto":
            backend = fastest_attention_backend(transformer, dtype)
        if backend and backend != "default" and hasattr(transformer, "set_attention_backend"):
            transformer.set_attention_backend(backend)
            self.attention_backend = backend
        if self.fused_kernels:
            self.install_kernels(pipe)
        if own is not None and self.installed_kernels is None:
            raise own.unavailable(
                f"{own.name} runs inside the engine's own attention kernel, which is not in use here "
                + ("(--no-fused-kernels)" if not self.fused_kernels else "(its start-up check failed: see the log)")
            )
        if self.quantization == "fp8":
            # After the engine's kernels (fp8 takes over the feed-forward's GELU projection they put in) and before
            # the compile, so that each activation's scaling fuses into the kernel that makes it.
            self.fp8, self.fp8_difference = fp8.install_checked(
                transformer,
                self.device,
                self.fp8_options.layers,
                self.fp8_options.gelu_kernel,
                self.fp8_options.fast_accum,
            )
        if self.cuda_graphs:
            self.graphs = GraphedForward(forward)
        if self.compile == "off":
            return
        import torch._dynamo

        if self.tune_kernels:
            import torch._inductor.config

            # Each fused kernel's block sizes are timed when it compiles: a longer warm-up, slightly faster kernels.
            # Set globally: torch.compile's own `options` cannot be given together with a `mode`.
            torch._inductor.config.coordinate_descent_tuning = True
            keep_cached_kernel_tuning()  # a warm restart reads the block sizes back instead of timing them again
        # One graph per (size, bucket). torch has no public setting for these limits.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
        # dynamic=False: static shapes only (no dynamic-shape kernels after a second size is seen).
        if self.compile == "blocks" and hasattr(transformer, "compile_repeated_blocks"):
            try:
                transformer.compile_repeated_blocks(fullgraph=True, mode=self.compile_mode, dynamic=False)
                self.static_shapes = True
                return
            except ValueError:  # diffusers names no repeated blocks for this model: compile it whole
                pass
        self._eager_transformer = transformer
        pipe.transformer = torch.compile(transformer, mode=self.compile_mode, dynamic=False)
        self.static_shapes = True

    def eager_transformer(self, pipe: Any) -> Any:
        """The transformer module itself, where torch.compile wrapped it whole (hooks and processors go on it)."""
        return self._eager_transformer if self._eager_transformer is not None else pipe.transformer

    def install_kernels(self, pipe: Any) -> None:
        """Put the engine's kernels (studio.engine.gpu.kernels) into a Wan transformer, if one forward on a small
        input with them matches the forward without them; else leave it as it was."""
        transformer = pipe.transformer
        if (
            type(transformer).__name__ != "WanTransformer3DModel"
            or self.attention_backend not in SDPA_KERNEL_OF_BACKEND
        ):
            return
        if self.own_attention is not None:
            own = OWN_ATTENTION[self.own_attention]
            installed = kernels.install_checked(transformer, self.own_attention, self.device, own.max_difference)
        else:
            installed = kernels.install_checked(transformer, self.attention_kernel, self.device)
        if installed is not None:
            self.kernels, self.installed_kernels = installed.counts, installed

    @property
    def attention_kernel(self) -> str:
        """The kernel self-attention runs on, as studio.engine.gpu.kernels names it."""
        if self.own_attention is not None and self.installed_kernels is not None:
            return self.own_attention
        return SDPA_KERNEL_OF_BACKEND.get(self.attention_backend, "default")

    @property
    def levers(self) -> dict[str, str]:
        """The levers in force that change a video's arithmetic, as a job's record names them."""
        levers = {"quantization": "fp8"} if self.fp8 is not None else {}
        own = OWN_ATTENTION.get(self.attention_kernel)
        if own is not None and own.lossy:
            levers["attention"] = self.attention_kernel
        return levers

    def remove_kernels(self) -> None:
        if self.installed_kernels is not None:
            self.installed_kernels.undo()
        self.kernels, self.installed_kernels = {}, None

    def fall_back_to_eager(self, pipe: Any) -> None:
        """The transformer as diffusers wrote it: no compile, no kernels of the engine's, default attention,
        no CUDA graphs. fp8 products stay where they were in force: they are what the server was started for, and
        they run eagerly too (slower: each activation's cast is then a pass of its own)."""
        if self._eager_transformer is not None:
            pipe.transformer, self._eager_transformer = self._eager_transformer, None
        transformer = pipe.transformer
        for module in transformer.modules():
            # `nn.Module.compile` (what compile_repeated_blocks calls) has no public undo: this is the attribute
            # it sets, and None is what an uncompiled module holds there.
            if getattr(module, "_compiled_call_impl", None) is not None:
                module._compiled_call_impl = None
        if self.installed_kernels is not None:
            # fp8 sits on top of the engine's GELU projection: out first, back in on the plain layers after.
            gelu_fused = self.fp8 is not None and self.fp8.gelu_fused
            fast_accum = self.fp8 is not None and self.fp8.fast_accum
            if self.fp8 is not None:
                self.fp8.undo()
            self.remove_kernels()
            if self.fp8 is not None:
                self.fp8 = fp8.install(
                    transformer, self.fp8_options.layers, fuse_gelu=gelu_fused, fast_accum=fast_accum
                )
        if self.attention_backend is not None and hasattr(transformer, "set_attention_backend"):
            transformer.set_attention_backend("native")
        self.compile, self.attention_backend = "off", None
        if self.graphs is not None:
            self.graphs.disable()
