"""How a managed server spreads and speeds up one request: its parallel degrees and vLLM-Omni's levers."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BaseModel, Field, StringConstraints, field_validator

from studio.settings_flags import flags

# A value a vLLM-Omni lever passes on (a cache backend, a quantization method, an attention backend): a name, never
# something the server's parser could read as a flag.
ServerOptionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
# Words for "the server's own default" in a lever that names a choice: the lever is then not passed at all.
SERVER_DEFAULT_WORDS = frozenset({"", "off", "none", "auto", "default"})


class ServerLevers(BaseModel):
    """How a managed server spreads and speeds up one request: its parallel degrees and vLLM-Omni's levers. Each
    vLLM-Omni lever reaches `vllm serve` only when set, so the server's own default holds otherwise."""

    group_title: ClassVar[str] = "server levers"

    tensor_parallel_size: int = Field(
        title="Tensor parallel",
        default=1,
        ge=1,
        description="GPUs per managed server (tensor parallel)",
        json_schema_extra=flags("--tp", "--tensor-parallel-size"),
    )
    cfg_parallel_size: int = Field(
        title="CFG parallel", default=1, ge=1, le=2, description="classifier-free guidance parallel size"
    )
    ulysses_degree: int = Field(title="Ulysses degree", default=1, ge=1, description="Ulysses sequence parallel degree")
    ring_degree: int | None = Field(
        title="Ring degree",
        default=None,
        ge=1,
        description="Ring sequence parallel degree of a vLLM-Omni server (its GPUs multiply the width); "
        "the embedded engine ignores it",
    )
    cache_backend: ServerOptionName | None = Field(
        title="Cache backend",
        default=None,
        description="diffusion cache of a vLLM-Omni server, e.g. tea_cache or cache_dit (default: off); "
        "the embedded engine ignores it",
        examples=["tea_cache", "cache_dit", "mag_cache", "sea_cache", "step_cache"],
    )
    quantization: ServerOptionName | None = Field(
        title="Quantization",
        default=None,
        description="weight quantization of a vLLM-Omni server, e.g. fp8 (default: off, or what the model's config "
        "says); the embedded engine ignores it",
        examples=["fp8"],
    )
    diffusion_attention_backend: ServerOptionName | None = Field(
        title="Attention backend",
        default=None,
        description="attention backend of a vLLM-Omni server, e.g. FLASH_ATTN, SAGE_ATTN or TORCH_SDPA (default: "
        "the server picks); the embedded engine ignores it (it picks its own fastest kernel)",
        examples=["FLASH_ATTN", "TORCH_SDPA", "SAGE_ATTN", "SAGE_ATTN_3", "CUDNN_ATTN", "FLASHINFER_ATTN"],
    )
    enforce_eager: bool = Field(
        title="Enforce eager",
        default=False,
        description="a vLLM-Omni server runs the model eagerly, without torch.compile (a quicker start, slower "
        "steps); the embedded engine ignores it",
    )
    vae_tiling: bool = Field(
        title="VAE tiling",
        default=False,
        description="a vLLM-Omni server decodes videos tile by tile (less GPU memory at large sizes); "
        "the embedded engine ignores it",
    )

    @field_validator("cache_backend", "quantization", "diffusion_attention_backend", mode="before")
    @classmethod
    def _server_default(cls, value: object) -> object:
        # "off", "auto" and the like (a form's first choice, an env value) mean: pass nothing, the server decides.
        if isinstance(value, str) and value.strip().lower() in SERVER_DEFAULT_WORDS:
            return None
        return value.strip() if isinstance(value, str) else value
