"""DeepSpeed-Ulysses sequence parallelism in a diffusers Wan transformer.

Each rank of a sequence group holds a contiguous share of the video's tokens through the whole transformer:
the rotary embedding and the hidden states are cut to that share before the first block, and the output is
gathered after the last projection. Everything in a block is local to a token except self-attention, where
each rank trades its tokens' heads for all tokens of its own heads (one all-to-all for each of q, k and v),
runs attention over the whole sequence for those heads, and trades back. Cross-attention needs nothing: each
query token attends to the whole prompt, which every rank has.

Shares may be uneven (a token count not divisible by the ranks): each share is padded to the longest for the
exchange and the padding is dropped before attention, so attention sees exactly the video's tokens. The
exchanges are torch's functional collectives, which torch.compile traces into the compiled blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed._functional_collectives as funcol

from studio.engine.gpu import kernels


@dataclass(frozen=True)
class TokenShares:
    """`tokens` split across `ranks` as torch.tensor_split splits them: the first `tokens % ranks` shares
    hold one more."""

    tokens: int
    ranks: int

    def sizes(self) -> list[int]:
        base, extra = divmod(self.tokens, self.ranks)
        return [base + (1 if i < extra else 0) for i in range(self.ranks)]

    def bounds(self, rank: int) -> tuple[int, int]:
        sizes = self.sizes()
        start = sum(sizes[:rank])
        return start, start + sizes[rank]

    @property
    def longest(self) -> int:
        return -(-self.tokens // self.ranks)


@dataclass(frozen=True)
class SequenceGroup:
    """A sequence group as the transformer sees it: its process group, its size and this rank's place."""

    group: Any
    rank: int
    size: int

    def share(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """This rank's share of `x`'s tokens along `dim`."""
        start, end = TokenShares(x.shape[dim], self.size).bounds(self.rank)
        return x.narrow(dim, start, end - start)

    def _all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        # x: (ranks, ...): row i goes to rank i; the result's row i came from rank i.
        out = funcol.all_to_all_single(x.contiguous(), None, None, self.group)
        return funcol.wait_tensor(out)

    def _gather(self, x: torch.Tensor) -> torch.Tensor:
        # (ranks * B, ...): every rank's x along the first dimension, in rank order.
        gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
        return funcol.wait_tensor(gather(x.contiguous(), 0, self.group))

    def tokens_to_heads(self, x: torch.Tensor, tokens: int) -> torch.Tensor:
        """(B, share, H, D) of this rank's tokens -> (B, tokens, H / ranks, D): every token, this rank's heads."""
        shares = TokenShares(tokens, self.size)
        batch, share, heads, dim = x.shape
        longest = shares.longest
        if share < longest:
            x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, longest - share))
        # (ranks, B, longest, H / ranks, D): the heads of rank i in row i.
        send = x.reshape(batch, longest, self.size, heads // self.size, dim).permute(2, 0, 1, 3, 4)
        received = self._all_to_all(send)  # row i: rank i's tokens, this rank's heads
        if tokens % self.size == 0:
            return received.permute(1, 0, 2, 3, 4).reshape(batch, tokens, heads // self.size, dim)
        return torch.cat([received[i, :, :size] for i, size in enumerate(shares.sizes())], dim=1)

    def heads_to_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """(B, tokens, H / ranks, D) -> (B, share, H, D): this rank's tokens, every head (tokens_to_heads undone)."""
        batch, tokens, local_heads, dim = x.shape
        shares = TokenShares(tokens, self.size)
        sizes, longest = shares.sizes(), shares.longest
        if tokens % self.size == 0:
            send = x.reshape(batch, self.size, longest, local_heads, dim).permute(1, 0, 2, 3, 4)
        else:
            pad = torch.nn.functional.pad
            send = torch.stack([pad(p, (0, 0, 0, 0, 0, longest - p.shape[1])) for p in x.split(sizes, dim=1)])
        received = self._all_to_all(send)  # row i: this rank's tokens, rank i's heads
        own = sizes[self.rank]
        return received[:, :, :own].permute(1, 2, 0, 3, 4).reshape(batch, own, self.size * local_heads, dim)

    def gather_tokens(self, x: torch.Tensor, tokens: int) -> torch.Tensor:
        """(B, share, C) -> (B, tokens, C): every rank's share, in order."""
        shares = TokenShares(tokens, self.size)
        longest = shares.longest
        if x.shape[1] < longest:
            x = torch.nn.functional.pad(x, (0, 0, 0, longest - x.shape[1]))
        gathered = self._gather(x).reshape(self.size, x.shape[0], longest, *x.shape[2:])
        if tokens % self.size == 0:
            return gathered.permute(1, 0, 2, *range(3, gathered.dim())).reshape(x.shape[0], tokens, *x.shape[2:])
        return torch.cat([gathered[i, :, :size] for i, size in enumerate(shares.sizes())], dim=1)


def _projections(attn: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if getattr(attn, "fused_projections", False):
        q, k, v = attn.to_qkv(hidden_states).chunk(3, dim=-1)
        return q, k, v
    return attn.to_q(hidden_states), attn.to_k(hidden_states), attn.to_v(hidden_states)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # Wan's rotary embedding on interleaved pairs, as diffusers' WanAttnProcessor computes it.
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    cos, sin = cos[..., 0::2], sin[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out.type_as(x)


class UlyssesWanAttnProcessor:
    """Self-attention of a Wan block over this rank's share of the tokens, with the heads-for-tokens exchange
    around the attention kernel. Its arithmetic is the processor's it replaces: the engine's kernels where
    those were installed (q/k normalisation and rotation in one pass, attention in (B, N, H, D) order), else
    diffusers' own (with the attention backend diffusers set, `_attention_backend`). Cross-attention, masks
    and image key/values go to the replaced processor.

    The rotary embedding reaches the blocks whole (it tells the sequence's length); each call takes this
    rank's share of it."""

    def __init__(self, replaced: Any, group: SequenceGroup, sdpa_kernel: str):
        self.replaced = replaced
        self.group = group
        self.sdpa_kernel = sdpa_kernel  # the SDPA backend of the engine's attention kernel (kernels.SDPA_BACKENDS)
        self.engine_kernels = isinstance(replaced, kernels.EngineWanAttnProcessor)
        # diffusers' set_attention_backend sets this on every processor that has it.
        self._attention_backend = getattr(replaced, "_attention_backend", None)

    def __call__(
        self,
        attn: Any,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if encoder_hidden_states is not None or attention_mask is not None or rotary_emb is None:
            return self.replaced(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)
        heads, tokens = attn.heads, rotary_emb[0].shape[1]
        cos, sin = (self.group.share(f, 1) for f in rotary_emb)
        q, k, v = _projections(attn, hidden_states)
        if self.engine_kernels:
            cos, sin = (f.reshape(f.shape[-3], f.shape[-1]) for f in (cos, sin))
            q, k = kernels.qk_norm_rope(q, k, attn.norm_q.weight, attn.norm_k.weight, cos, sin, attn.norm_q.eps, heads)
        else:
            q = _rotate(attn.norm_q(q).unflatten(2, (heads, -1)), cos, sin)
            k = _rotate(attn.norm_k(k).unflatten(2, (heads, -1)), cos, sin)
        v = v.unflatten(2, (heads, -1))
        q, k, v = (self.group.tokens_to_heads(x, tokens) for x in (q, k, v))
        if self.engine_kernels:
            out = kernels.attention_bnhd(q, k, v, self.sdpa_kernel)
        else:
            from diffusers.models.attention_dispatch import dispatch_attention_fn

            out = dispatch_attention_fn(q, k, v, backend=self._attention_backend)
        out = self.group.heads_to_tokens(out).flatten(2, 3).type_as(q)
        return attn.to_out[1](attn.to_out[0](out))


@dataclass
class SequenceParallel:
    """Ulysses in one Wan transformer: hooks that cut the tokens before the first block and gather them after
    the output projection, and the Ulysses processor on every block's self-attention. `undo` takes it out."""

    group: SequenceGroup
    tokens: int = 0  # the sequence's length in the forward in progress (set by the transformer's pre-hook)
    _hooks: list[Any] = field(default_factory=list)
    _processors: list[tuple[Any, Any]] = field(default_factory=list)

    def install(self, transformer: torch.nn.Module, sdpa_kernel: str) -> None:
        """`transformer`: the module itself (not a torch.compile wrapper of it)."""
        heads = int(transformer.config.num_attention_heads)
        if heads % self.group.size:
            raise ValueError(f"the ulysses degree ({self.group.size}) must divide the model's heads ({heads})")
        if type(transformer).__name__ != "WanTransformer3DModel":
            raise ValueError(f"sequence parallelism runs Wan transformers, not {type(transformer).__name__}")
        self.undo()
        patch = transformer.config.patch_size
        self._hooks = [
            transformer.register_forward_pre_hook(self._count_tokens(patch), with_kwargs=True),
            transformer.blocks[0].register_forward_pre_hook(self._cut, with_kwargs=True),
            transformer.proj_out.register_forward_hook(self._gather),
        ]
        for block in transformer.blocks:
            self._processors.append((block.attn1, block.attn1.processor))
            block.attn1.set_processor(UlyssesWanAttnProcessor(block.attn1.processor, self.group, sdpa_kernel))

    def undo(self) -> None:
        for hook in self._hooks:
            hook.remove()
        for module, processor in self._processors:
            if isinstance(module.processor, UlyssesWanAttnProcessor):
                module.set_processor(processor)
        self._hooks, self._processors = [], []

    def _count_tokens(self, patch: Any) -> Any:
        p_t, p_h, p_w = patch

        def count(_module: Any, args: tuple, kwargs: dict) -> None:
            latents = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            _, _, frames, height, width = latents.shape
            self.tokens = (frames // p_t) * (height // p_h) * (width // p_w)

        return count

    def _cut(self, _module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if "hidden_states" in kwargs:
            return args, {**kwargs, "hidden_states": self.group.share(kwargs["hidden_states"], 1)}
        return (self.group.share(args[0], 1), *args[1:]), kwargs

    def _gather(self, _module: Any, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        return self.group.gather_tokens(output, self.tokens)
