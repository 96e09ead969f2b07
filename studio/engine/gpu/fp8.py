"""fp8 matmuls for a Wan transformer's blocks: e4m3 weights with a scale per output channel, activations scaled per
token (row) as they enter each product.

Each linear layer of the repeated blocks (self-attention's fused q/k/v and output projections, cross-attention's q,
k/v and output projections, the feed-forward's two projections) becomes an `Fp8Linear`: its weight is quantized
once, at install, to float8_e4m3fn rows with one float32 scale each; at each call the activation's rows are scaled
to e4m3's range and cast, and one `torch._scaled_mm` takes both with their scales and the bias, and writes bf16.

The scaling and the cast are plain torch ops inside the compiled blocks: inductor fuses them into the kernel that
makes the activation (the norm and modulation before q/k/v), so the activation reaches memory once, in fp8, and no
pass of its own is paid for it (measured: a separate cast costs more than the fp8 product saves). The feed-forward's
GELU is the exception: its rows are 8,960 wide, and inductor's kernel for GELU, row maximum and cast reads each row
twice and computes the GELU twice. There one Triton kernel (`gelu_quantize_rows`) does the three: the first
projection writes its bf16 product, the kernel takes each row in two passes over chunks of GELU_CHUNK columns (the
largest GELU magnitude, then the scaled cast; the second pass finds the row in L2) and writes the GELU's e4m3 rows
and their scales, and the second projection takes them: much faster than inductor's kernel, and a little faster
than the same kernel holding a whole row in registers (few such programs fit on a multiprocessor at once;
benchmarks/RESULTS.md, fp8 with fast accumulation). It is used where asked for (`Fp8Options.gelu_kernel`, on by
default) and where a check on the GPU at install finds it equal to the torch version (`gelu_kernel_problem`). The
products accumulate in the fp8 MMA's own accumulator (`Fp8Linear.fast_accum`, `Fp8Options.fast_accum`): faster than
cuBLAS's float32 promotion, at the same fidelity (benchmarks/RESULTS.md, fp8 with fast accumulation). The embedding
layers and the output projection stay in bf16, as do norms, attention and the modulation: only the products change.

`install` quantizes a transformer and returns a handle that puts the bf16 layers back; `install_checked` keeps it
only where a forward with it stays close to the bf16 one. The bf16 weights are moved to the host while fp8 is in
force, so the device holds the fp8 copy alone.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, get_args

import torch

from studio.engine_levers import QuantizationName

log = logging.getLogger(__name__)

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
# Where the scaled product needs fp8 hardware: Ada (8.9) and Hopper (9.0) and later.
MIN_CAPABILITY = (8, 9)
# A forward with fp8 products must stay within this relative RMS difference of the bf16 forward on a small input
# (e4m3 keeps 3 mantissa bits: one product's relative error is about 2-3%, and 30 blocks average much of it out).
MAX_RELATIVE_RMS = 0.15
QUANTIZATION_CHOICES: tuple[str, ...] = get_args(QuantizationName)
# The kinds of block layers fp8 can take: the attentions' projections, the feed-forward's two.
LAYER_KINDS = ("attention", "ffn")


@dataclass(frozen=True)
class Fp8Options:
    """How fp8 runs where it is asked for: the block layers it takes (some of LAYER_KINDS), the feed-forward's GELU
    in the cast's Triton kernel where that kernel checks out (`gelu_quantize_rows`: faster than inductor's kernel
    for the same pass), and the products accumulating in the fp8 MMA's own accumulator (`Fp8Linear.fast_accum`:
    faster, at the same fidelity; benchmarks/RESULTS.md, fp8 with fast accumulation). The defaults are what
    `--quantization fp8` serves; benchmarks/gpu/levers_gpu.py builds engines with others to compare them."""

    layers: tuple[str, ...] = LAYER_KINDS
    gelu_kernel: bool = True
    fast_accum: bool = True


class Fp8Unavailable(RuntimeError):
    """fp8 was asked for where it cannot run (no CUDA, an older GPU, a pipeline without Wan blocks)."""


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` (rows, K) as e4m3 rows and their float32 scales (rows, 1): x ~= q * scale, each row's largest magnitude
    at e4m3's largest value."""
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12)
    scale = amax / FP8_MAX
    quantized = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return quantized, scale


def fp8_available(device: str) -> str | None:
    """None where fp8 products run on `device`; else why not, in a user's words."""
    if device != "cuda" or not torch.cuda.is_available():
        return f"fp8 matmuls need a CUDA GPU of compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer (this engine runs on {device})"
    capability = torch.cuda.get_device_capability()
    if capability < MIN_CAPABILITY:
        name = torch.cuda.get_device_name()
        return (
            f"fp8 matmuls need a CUDA GPU of compute capability {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer "
            f"({name} is {capability[0]}.{capability[1]})"
        )
    return None


# --- the feed-forward's GELU, row maximum and cast in one pass ---------------------------------------------

# 0.5 * x * (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2 / pi) * (x + 0.044715 x^3): the tanh GELU.
GELU_TANH_C = 0.7978845608028654
GELU_TANH_CUBE = 0.044715
# Columns the GELU kernel takes at a time (two passes over each row); 0: the whole row at once, in one pass.
# benchmarks/experiments/fp8_gelu_gpu.py times both.
GELU_CHUNK = 1024


@functools.cache
def _gelu_quantize_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def omni_fp8_gelu_quantize_rows(
        x_ptr,
        q_ptr,
        scale_ptr,
        x_stride,
        width,
        fp8_max,
        BLOCK: tl.constexpr,
        CHUNKS: tl.constexpr,
        GELU_C: tl.constexpr,  # the module's constants come in as arguments: a kernel reads no Python globals
        GELU_CUBE: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        column = tl.arange(0, BLOCK)
        if CHUNKS == 1:
            # The row read once into registers, its GELU, its largest magnitude, and the e4m3 row and its scale
            # written once (a whole row per program: few programs fit on a multiprocessor at a time).
            mask = column < width
            x = tl.load(x_ptr + row * x_stride + column, mask=mask, other=0.0).to(tl.float32)
            gelu = x * tl.sigmoid(2.0 * (GELU_C * (x + GELU_CUBE * x * x * x)))
            scale = tl.maximum(tl.max(tl.abs(gelu), axis=0), 1e-12) / fp8_max
            quantized = tl.clamp(gelu / scale, -fp8_max, fp8_max)
            tl.store(q_ptr + row * width + column, quantized.to(q_ptr.dtype.element_ty), mask=mask)
        else:
            # Two passes over the row in chunks of BLOCK: its largest GELU magnitude, then the scaled cast. Small
            # programs, many of them resident at once; the second pass finds the row in L2, where the first kept
            # it, so memory still sees one read of it.
            largest = tl.zeros([BLOCK], dtype=tl.float32)
            for chunk in tl.static_range(CHUNKS):
                offsets = chunk * BLOCK + column
                x = tl.load(
                    x_ptr + row * x_stride + offsets, mask=offsets < width, other=0.0, eviction_policy="evict_last"
                ).to(tl.float32)
                gelu = x * tl.sigmoid(2.0 * (GELU_C * (x + GELU_CUBE * x * x * x)))
                largest = tl.maximum(largest, tl.abs(gelu))
            scale = tl.maximum(tl.max(largest, axis=0), 1e-12) / fp8_max
            for chunk in tl.static_range(CHUNKS):
                offsets = chunk * BLOCK + column
                mask = offsets < width
                x = tl.load(x_ptr + row * x_stride + offsets, mask=mask, other=0.0, eviction_policy="evict_first").to(
                    tl.float32
                )
                gelu = x * tl.sigmoid(2.0 * (GELU_C * (x + GELU_CUBE * x * x * x)))
                quantized = tl.clamp(gelu / scale, -fp8_max, fp8_max)
                tl.store(q_ptr + row * width + offsets, quantized.to(q_ptr.dtype.element_ty), mask=mask)
        tl.store(scale_ptr + row, scale)

    return omni_fp8_gelu_quantize_rows


def gelu_quantize_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The tanh GELU of `x` (rows, K) in its own dtype, then `quantize_rows`: what the second projection of the
    feed-forward takes when the GELU runs as torch ops."""
    return quantize_rows(torch.nn.functional.gelu(x, approximate="tanh"))


def _gelu_quantize_into(
    x: torch.Tensor, quantized: torch.Tensor, scale: torch.Tensor, chunk: int | None = None
) -> None:
    """The kernel over `x`'s rows, in two passes of `chunk` columns (a power of two; default GELU_CHUNK, read at
    each launch), or in one pass over the whole row held in registers where `chunk` is 0."""
    chunk = GELU_CHUNK if chunk is None else chunk
    rows, width = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    whole_row = 1 << max(4, (width - 1).bit_length())
    block = min(chunk, whole_row) if chunk else whole_row
    if block & (block - 1):
        raise ValueError(f"the GELU kernel's chunk must be a power of two, got {chunk}")
    warps = max(1, min(16, block // 256))  # 8 columns a thread
    _gelu_quantize_kernel()[(rows,)](
        x,
        quantized,
        scale,
        x.stride(0),
        width,
        FP8_MAX,
        BLOCK=block,
        CHUNKS=-(-width // block),
        GELU_C=GELU_TANH_C,
        GELU_CUBE=GELU_TANH_CUBE,
        num_warps=warps,
    )


@torch.library.custom_op("omni_engine::fp8_gelu_quantize_rows", mutates_args=())
def gelu_quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`gelu_quantize_reference`'s arithmetic, the GELU kept in float32 until the cast; on a GPU one Triton kernel
    (see the module's docstring)."""
    if not x.is_cuda:
        return gelu_quantize_reference(x)
    quantized = torch.empty(x.shape, dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty((x.shape[0], 1), dtype=torch.float32, device=x.device)
    _gelu_quantize_into(x, quantized, scale)
    return quantized, scale


@gelu_quantize_rows.register_fake
def _gelu_quantize_rows_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape, dtype=FP8_DTYPE), x.new_empty((x.shape[0], 1), dtype=torch.float32)


# Against the float32 GELU, the kernel's dequantized rows may differ from the torch version's by this much more
# (relative RMS; both carry e4m3's rounding, about 2-3%), and its scales by this share (the torch version rounds
# the GELU to bf16 before it takes the maximum).
MAX_KERNEL_EXTRA_RMS = 0.005
MAX_SCALE_DIFFERENCE = 0.01


@functools.cache
def gelu_kernel_problem(device: str, width: int = 8960) -> str | None:
    """None where the Triton GELU-and-cast kernel runs on `device` and matches the torch version on random rows of
    `width` (every element written, scales and values as close as the two roundings allow); else what is wrong.
    Asked once per device and width."""
    if device != "cuda" or not torch.cuda.is_available():
        return "the GELU-and-cast kernel runs on CUDA GPUs"
    try:
        _gelu_quantize_kernel()
    except ImportError:
        return "Triton is not installed"
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(67, width, device="cuda", generator=generator) * 2.5).to(torch.bfloat16)
    quantized = torch.full(x.shape, float("nan"), device="cuda").to(FP8_DTYPE)  # poisoned: each must be written
    scale = torch.full((x.shape[0], 1), float("nan"), device="cuda")
    try:
        _gelu_quantize_into(x, quantized, scale)
        torch.cuda.synchronize()
    except Exception as exc:  # a compile or launch this Triton or GPU refuses
        return f"the GELU-and-cast kernel failed ({type(exc).__name__}: {exc})"
    exact = torch.nn.functional.gelu(x.float(), approximate="tanh")
    reference_q, reference_scale = gelu_quantize_reference(x)
    values = quantized.float() * scale
    if not torch.isfinite(values).all():
        return "the GELU-and-cast kernel left elements unwritten"
    scale_difference = float(((scale - reference_scale).abs() / reference_scale).max())
    extra = relative_rms(values, exact) - relative_rms(reference_q.float() * reference_scale, exact)
    if scale_difference > MAX_SCALE_DIFFERENCE or extra > MAX_KERNEL_EXTRA_RMS:
        return (
            f"the GELU-and-cast kernel does not match the torch version (scales {scale_difference:.2%} apart, "
            f"values {extra:+.2%} RMS)"
        )
    return None


class Fp8Linear(torch.nn.Module):
    """A linear layer whose product runs in fp8 (see the module's docstring); `activation` "gelu_tanh" applies
    the tanh GELU to the product (the feed-forward's first projection), "" none; `input_activation` "gelu_tanh"
    applies it to the input instead, in the pass that scales and casts it (`gelu_quantize_rows`: the second
    projection, after a first one without its GELU)."""

    def __init__(
        self,
        linear: torch.nn.Linear,
        activation: str = "",
        bias_inside: bool = True,
        input_activation: str = "",
        fast_accum: bool = False,
    ):
        super().__init__()
        if activation and input_activation:
            raise ValueError("a layer takes its GELU on its input or on its product, not both")
        weight = linear.weight.detach()
        if weight.shape[1] % 16 or weight.shape[0] % 16:
            raise ValueError(f"fp8 products need both sides of the weight divisible by 16, got {tuple(weight.shape)}")
        quantized, scale = quantize_rows(weight)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.out_dtype = weight.dtype if weight.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        self.activation = activation
        self.input_activation = input_activation
        self.bias_inside = bias_inside  # the bias in the product's epilogue (bias_in_product), else added after
        # Hopper's fp8 MMA accumulates with fewer bits than float32; without fast accumulation cuBLAS adds the
        # partial sums into float32 every few K steps, which costs time. With it, the MMA's own accumulator runs
        # the whole K (what torchao's float8 inference does for its forward products).
        self.fast_accum = fast_accum
        # (N, K) row-major: its transpose is the column-major (K, N) the scaled product takes.
        self.register_buffer("weight_fp8", quantized.contiguous())
        self.register_buffer("weight_scale", scale.reshape(1, -1).contiguous())  # (1, N)
        bias = linear.bias.detach().to(self.out_dtype) if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def quantized_input(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.input_activation == "gelu_tanh":
            return gelu_quantize_rows(rows)
        return quantize_rows(rows)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        quantized, scale = self.quantized_input(rows)
        bias_inside = self.bias is not None and self.bias_inside
        out = torch._scaled_mm(
            quantized,
            self.weight_fp8.t(),
            scale_a=scale,
            scale_b=self.weight_scale,
            bias=self.bias if bias_inside else None,
            out_dtype=self.out_dtype,
            use_fast_accum=self.fast_accum,
        )
        if self.bias is not None and not bias_inside:  # added in the next fused kernel instead
            out = out + self.bias
        if self.activation == "gelu_tanh":
            out = torch.nn.functional.gelu(out, approximate="tanh")
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        activation = (
            f"input_activation={self.input_activation!r}"
            if self.input_activation
            else f"activation={self.activation!r}"
        )
        accumulation = ", fast_accum=True" if self.fast_accum else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, {activation}{accumulation}"


def reference_fp8_linear(layer: Fp8Linear, x: torch.Tensor) -> torch.Tensor:
    """What `Fp8Linear` computes, in float32 from the dequantized operands (for checking the scaled product)."""
    rows = x.reshape(-1, layer.in_features)
    quantized, scale = gelu_quantize_reference(rows) if layer.input_activation else quantize_rows(rows)
    weight = layer.weight_fp8.float() * layer.weight_scale.reshape(-1, 1)
    out = (quantized.float() * scale) @ weight.t()
    if layer.bias is not None:
        out = out + layer.bias.float()
    if layer.activation == "gelu_tanh":
        out = torch.nn.functional.gelu(out, approximate="tanh")
    return out.to(layer.out_dtype).view(*x.shape[:-1], layer.out_features)


@functools.cache
def bias_in_product(device_type: str) -> bool:
    """Whether this torch's scaled product on `device_type` takes a bias with row-wise scales (then the bias is
    added in the product's epilogue); asked once, with a tiny product."""
    try:
        a = torch.zeros(16, 16, device=device_type).to(FP8_DTYPE)
        b = torch.zeros(16, 16, device=device_type).to(FP8_DTYPE)
        ones_a = torch.ones(16, 1, device=device_type)
        ones_b = torch.ones(1, 16, device=device_type)
        bias = torch.zeros(16, device=device_type, dtype=torch.bfloat16)
        torch._scaled_mm(a, b.t(), scale_a=ones_a, scale_b=ones_b, bias=bias, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as exc:
        log.info("fp8: the scaled product takes no bias here (%s); it is added after", exc)
        return False
    return True


# --- which layers ------------------------------------------------------------------------------------------


def _block_linears(
    block: torch.nn.Module, kinds: tuple[str, ...] = LAYER_KINDS
) -> list[tuple[torch.nn.Module, str, torch.nn.Module, str]]:
    """The layers of one Wan block that become fp8, of `kinds`: (parent, attribute, layer, activation). The
    attribute is a name, or an index into a ModuleList."""
    found: list[tuple[torch.nn.Module, str, torch.nn.Module, str]] = []
    for attention_name in ("attn1", "attn2") if "attention" in kinds else ():
        attention = getattr(block, attention_name, None)
        if attention is None:
            continue
        for name in _projections_in_use(attention):
            layer = getattr(attention, name, None)
            if isinstance(layer, torch.nn.Linear):
                found.append((attention, name, layer, ""))
        out = getattr(attention, "to_out", None)
        if isinstance(out, torch.nn.ModuleList) and isinstance(out[0], torch.nn.Linear):
            found.append((out, "0", out[0], ""))
    net = getattr(getattr(block, "ffn", None), "net", None)
    if "ffn" in kinds and isinstance(net, torch.nn.ModuleList) and len(net) >= 3:
        first = net[0]
        proj = getattr(first, "proj", None)
        # diffusers' tanh GELU projection, or the engine's EpilogueGELU that stands in for it (studio.engine.gpu.kernels)
        if isinstance(proj, torch.nn.Linear) and getattr(first, "approximate", "tanh") == "tanh":
            found.append((net, "0", first, "gelu_tanh"))
        if isinstance(net[2], torch.nn.Linear):
            found.append((net, "2", net[2], ""))
    return found


def _projections_in_use(attention: torch.nn.Module) -> tuple[str, ...]:
    """The input projections a Wan attention's forward calls: once fused, diffusers keeps the separate ones too,
    unused (they stay bf16)."""
    if not getattr(attention, "fused_projections", False):
        return ("to_q", "to_k", "to_v")
    return ("to_qkv",) if isinstance(getattr(attention, "to_qkv", None), torch.nn.Linear) else ("to_q", "to_kv")


def _linear_of(layer: torch.nn.Module) -> torch.nn.Linear:
    return layer if isinstance(layer, torch.nn.Linear) else layer.proj


def _set(parent: torch.nn.Module, attribute: str, module: torch.nn.Module) -> None:
    if isinstance(parent, torch.nn.ModuleList):
        parent[int(attribute)] = module
    else:
        setattr(parent, attribute, module)


@dataclass
class Fp8Installed:
    """What `install` changed, to undo it: each replaced layer with its parent and where it sat."""

    replaced: list[tuple[torch.nn.Module, str, torch.nn.Module, torch.device]] = field(default_factory=list)
    gelu_fused: bool = False  # the feed-forward's GELU in its second projection's cast (`gelu_quantize_rows`)
    fast_accum: bool = False  # the products accumulate in the fp8 MMA's own accumulator (`Fp8Linear.fast_accum`)

    @property
    def layers(self) -> int:
        return len(self.replaced)

    def undo(self) -> None:
        for parent, attribute, layer, device in reversed(self.replaced):
            _set(parent, attribute, layer.to(device))
        self.replaced = []
        self.gelu_fused = self.fast_accum = False


def _with_gelu_on_the_second_projection(
    found: list[tuple[torch.nn.Module, str, torch.nn.Module, str]],
) -> list[tuple[torch.nn.Module, str, torch.nn.Module, str, str]]:
    """`found` as (parent, attribute, layer, activation, input_activation), the feed-forward's GELU moved from its
    first projection's product to its second projection's input (where both are in `found`)."""
    net = next((parent for parent, attribute, _, activation in found if activation == "gelu_tanh"), None)
    second = any(parent is net and attribute == "2" for parent, attribute, *_ in found)
    moved = []
    for parent, attribute, layer, activation in found:
        if second and parent is net:
            moved.append((parent, attribute, layer, "", "gelu_tanh" if attribute == "2" else ""))
        else:
            moved.append((parent, attribute, layer, activation, ""))
    return moved


def install(
    transformer: torch.nn.Module,
    kinds: tuple[str, ...] = LAYER_KINDS,
    fuse_gelu: bool = False,
    fast_accum: bool = False,
) -> Fp8Installed:
    """Make the linear layers of `kinds` in a Wan transformer's repeated blocks fp8 (`Fp8Linear`); the bf16 layers
    go to the host until `undo`. With `fuse_gelu`, the feed-forward's GELU goes with its second projection's cast
    (`gelu_quantize_rows`) instead of after its first product; with `fast_accum`, the products accumulate in the
    fp8 MMA's accumulator. Raises Fp8Unavailable for a transformer without Wan blocks."""
    if not kinds or set(kinds) - set(LAYER_KINDS):
        raise ValueError(f"fp8 layer kinds must be some of {', '.join(LAYER_KINDS)}, got {kinds!r}")
    blocks = getattr(transformer, "blocks", None)
    if type(transformer).__name__ != "WanTransformer3DModel" or not isinstance(blocks, torch.nn.ModuleList):
        raise Fp8Unavailable(f"fp8 matmuls run Wan transformers' blocks, not {type(transformer).__name__}")
    installed = Fp8Installed(fast_accum=fast_accum)
    bias_inside = bias_in_product(next(transformer.parameters()).device.type)
    try:
        for block in blocks:
            found = _block_linears(block, kinds)
            layers = _with_gelu_on_the_second_projection(found) if fuse_gelu else [(*item, "") for item in found]
            for parent, attribute, layer, activation, input_activation in layers:
                fp8 = Fp8Linear(_linear_of(layer), activation, bias_inside, input_activation, fast_accum)
                installed.gelu_fused = installed.gelu_fused or bool(input_activation)
                device = _linear_of(layer).weight.device
                _set(parent, attribute, fp8)
                installed.replaced.append((parent, attribute, layer.to("cpu"), device))
    except BaseException:
        installed.undo()
        raise
    if not installed.layers:
        raise Fp8Unavailable("the transformer's blocks have no linear layers fp8 can take")
    return installed


def install_checked(
    transformer: torch.nn.Module,
    device: str,
    kinds: tuple[str, ...] = LAYER_KINDS,
    gelu_kernel: bool = False,
    fast_accum: bool = False,
) -> tuple[Fp8Installed, float]:
    """`install`, kept only where one forward on a small input with fp8 products stays within MAX_RELATIVE_RMS of
    the bf16 forward; returns the handle and that difference. The feed-forward's GELU goes into the cast's kernel
    where `gelu_kernel` and that kernel checks out here (`gelu_kernel_problem`). Raises Fp8Unavailable (the
    transformer left as it was) where it cannot run or does not match."""
    from studio.engine.gpu.kernels import _small_transformer_inputs

    problem = fp8_available(device)
    if problem is not None:
        raise Fp8Unavailable(problem)
    fuse_gelu = False
    width = ffn_width(transformer)
    if gelu_kernel and "ffn" in kinds and width:
        kernel_problem = gelu_kernel_problem(device, width)
        fuse_gelu = kernel_problem is None
        if kernel_problem is not None:
            log.info("fp8: the feed-forward's GELU stays with its first product (%s)", kernel_problem)
    inputs = _small_transformer_inputs(transformer, device)
    installed: Fp8Installed | None = None
    try:
        with torch.inference_mode():
            expected = transformer(**inputs, return_dict=False)[0].float()
            installed = install(transformer, kinds, fuse_gelu, fast_accum)
            actual = transformer(**inputs, return_dict=False)[0].float()
    except Fp8Unavailable:
        raise
    except Exception as exc:  # a scaled product this torch or GPU refuses
        if installed is not None:
            installed.undo()
        raise Fp8Unavailable(f"fp8 matmuls failed on this GPU ({type(exc).__name__}: {exc})") from exc
    difference = relative_rms(actual, expected)
    if not difference <= MAX_RELATIVE_RMS:
        installed.undo()
        raise Fp8Unavailable(
            f"a forward with fp8 matmuls differs from the bf16 one by {difference:.1%} (RMS), more than "
            f"{MAX_RELATIVE_RMS:.0%}"
        )
    log.info(
        "fp8 matmuls in %d layers%s%s (a forward within %.2f%% RMS of the bf16 one)",
        installed.layers,
        ", the feed-forward's GELU in one kernel with its cast" if installed.gelu_fused else "",
        ", fast accumulation" if installed.fast_accum else "",
        100 * difference,
    )
    return installed, difference


def ffn_width(transformer: torch.nn.Module) -> int:
    """The width of a Wan transformer's feed-forward (its second projection's input); 0 where it has none."""
    blocks = getattr(transformer, "blocks", None) or []
    net = getattr(getattr(blocks[0], "ffn", None), "net", None) if len(blocks) else None
    last = net[-1] if isinstance(net, torch.nn.ModuleList) and len(net) else None
    return last.in_features if isinstance(last, torch.nn.Linear | Fp8Linear) else 0


def relative_rms(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """RMS of the difference over the RMS of `expected`."""
    return float(((actual - expected).pow(2).mean().sqrt() / expected.pow(2).mean().sqrt().clamp_min(1e-12)).item())


def parse_quantization(value: Any) -> str:
    text = str(value or "none").strip().lower()
    if text not in QUANTIZATION_CHOICES:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATION_CHOICES)}, got {str(value)[:40]!r}")
    return text
