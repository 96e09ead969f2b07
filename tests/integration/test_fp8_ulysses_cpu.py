"""fp8 products and 8-bit attention under Ulysses: a Wan transformer with the engine's kernels and fp8 layers, its
tokens split across two ranks (two processes over gloo on 127.0.0.1), gives the one-rank forward's output, with
exact attention, with SageAttention's and with FlashAttention 3's fp8 forward.

The engine serves fp8 on CUDA GPUs only, but this torch runs the row-wise scaled product on the CPU too, so the
arithmetic of the combination is checked here with the same modules the engine installs: the engine's
attention processor (studio.engine.gpu.kernels), fp8 layers (studio.engine.gpu.fp8, fast accumulation as served)
and the Ulysses processor and hooks (studio.engine.parallel.sequence). fp8 scales each token's row on its own, so
a rank's share of the tokens quantizes exactly as the whole sequence does. cfg-parallel splits the batch, whose
rows fp8 also scales one by one. SageAttention's and FlashAttention 3's kernels run on GPUs only: there a stand-in
package keeps each one's contract (`STAND_INS`), to check that each rank's attention goes through it with every token
and its share of the heads. For FlashAttention 3's fp8 forward the engine's own quantization of q, k and v runs as
served: a rank's share of the queries in cross-attention scales apart from the whole sequence's, and still rounds
alike."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from studio.engine.gpu import fp8, kernels
from studio.engine.parallel.groups import free_port
from tests.unit.test_fp8 import transformer

ROOT = Path(__file__).resolve().parents[2]
RANKS = 2
RANK_TIMEOUT_S = 120
# 3 latent frames of 3 x 5 patches: 45 tokens, split 23 and 22 (an uneven share).
LATENT_SHAPE = (2, 4, 3, 6, 10)


SAGE_STAND_IN = '''"""Stands in for SageAttention's package, whose kernels run on CUDA GPUs only: `sageattn` keeps the package's
documented contract (q, k, v as (B, N, H, D) with tensor_layout="NHD", the result in that layout and q's dtype)
with exact attention, and writes each call's q shape to the file ATTENTION_CALLS names."""
import os

import torch


def sageattn(q, k, v, tensor_layout="HND", is_causal=False, **_):
    assert tensor_layout == "NHD" and not is_causal and q.stride(-1) == 1
    with open(os.environ["ATTENTION_CALLS"], "a") as calls:
        calls.write(",".join(str(n) for n in q.shape) + "\\n")
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2).to(q.dtype)
'''

FLASH3_STAND_IN = '''"""Stands in for FlashAttention 3's interface, whose kernels run on Hopper GPUs only: `flash_attn_func` keeps its
documented fp8 contract (q, k, v in float8_e4m3fn as (B, N, H, D), their (B, H) float32 descales, the result in
bf16) with exact attention over the descaled inputs, and writes each call's q shape to the file ATTENTION_CALLS
names."""
import os

import torch


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, q_descale=None, k_descale=None, v_descale=None):
    assert q.dtype == k.dtype == v.dtype == torch.float8_e4m3fn and not causal
    with open(os.environ["ATTENTION_CALLS"], "a") as calls:
        calls.write(",".join(str(n) for n in q.shape) + "\\n")
    q, k, v = (x.float() * s[:, None, :, None] for x, s in ((q, q_descale), (k, k_descale), (v, v_descale)))
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2).to(torch.bfloat16)
'''

# The attention kernels that run on GPUs only, by the engine's name: the module a stand-in takes the place of, and it.
STAND_INS = {"sage": ("sageattention", SAGE_STAND_IN), "flash3-fp8": ("flash_attn_interface", FLASH3_STAND_IN)}


def with_fp8(model: torch.nn.Module, attention: str) -> torch.nn.Module:
    """The model as the engine serves `--quantization fp8` (with `--attention-backend sage` where `attention` is
    "sage"): its kernels first, then fp8 layers on top."""
    kernels.install(model, attention)
    fp8.install(model, fuse_gelu=True, fast_accum=True)
    return model


def forward(model: torch.nn.Module) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(*LATENT_SHAPE, generator=generator).to(torch.bfloat16)
    context = torch.randn(2, 7, 32, generator=generator).to(torch.bfloat16)
    with torch.inference_mode():
        return model(x, torch.tensor([300.0, 700.0]), context, return_dict=False)[0].float()


def rank_main(rank: int, port: int, out: str, attention: str) -> None:
    """One rank: join the group, put the Ulysses processor over the fp8 model, run the forward; rank 0 saves it."""
    import torch.distributed as dist

    from studio.engine.parallel.sequence import SequenceGroup, SequenceParallel, UlyssesWanAttnProcessor

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=RANKS)
    try:
        model = with_fp8(transformer(), attention)
        SequenceParallel(SequenceGroup(dist.group.WORLD, rank, RANKS)).install(model, attention)
        processors = [block.attn1.processor for block in model.blocks]
        assert all(isinstance(p, UlyssesWanAttnProcessor) and p.engine_kernels for p in processors)
        assert isinstance(model.blocks[0].attn1.to_qkv, fp8.Fp8Linear)
        output = forward(model)
        if rank == 0:
            torch.save(output, out)
    finally:
        dist.destroy_process_group()


def stand_in(attention: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in package for `attention` in `folder`, imported here in its module's place, and on the ranks' path."""
    name, text = STAND_INS[attention]
    package = folder / name
    package.mkdir()
    (package / "__init__.py").write_text(text)
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))


def shapes(calls: Path) -> set[tuple[int, ...]]:
    return {tuple(int(n) for n in line.split(",")) for line in calls.read_text().split()}


@pytest.mark.parametrize("attention", ["default", "sage", "flash3-fp8"])
def test_fp8_under_ulysses_gives_the_one_rank_forward(
    attention: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if attention in STAND_INS:
        stand_in(attention, tmp_path, monkeypatch)
        monkeypatch.setenv("ATTENTION_CALLS", str(tmp_path / "calls-one-rank"))
    expected = forward(with_fp8(transformer(), attention))
    plain = forward(transformer())
    port, out = free_port(), tmp_path / "rank0.pt"
    code = (
        "import sys; from tests.integration.test_fp8_ulysses_cpu import rank_main; "
        "rank_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])"
    )
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(rank), str(port), str(out), attention],
            cwd=ROOT,
            env={**os.environ, "ATTENTION_CALLS": str(tmp_path / f"calls-rank{rank}")},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(RANKS)
    ]
    logs = []
    for process in ranks:
        try:
            logs.append(process.communicate(timeout=RANK_TIMEOUT_S)[0])
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            raise
    assert [p.returncode for p in ranks] == [0] * RANKS, "\n".join(logs)
    got = torch.load(out)
    assert got.shape == expected.shape
    # The same products and roundings; only the attention's sums may run in another order.
    assert fp8.relative_rms(got, expected) < 1e-3
    # ... while fp8 itself moves the output measurably (about 5% RMS here): a rank that ran bf16 would show.
    assert fp8.relative_rms(expected, plain) > 0.01
    if attention in STAND_INS:
        batch, _, frames, height, width = LATENT_SHAPE
        tokens, heads, head_dim = frames * (height // 2) * (width // 2), 2, 16
        # one rank: self- and cross-attention over every token and head
        assert shapes(tmp_path / "calls-one-rank") == {(batch, tokens, heads, head_dim)}
        # on the ranks, self-attention takes every token and this rank's share of the heads; cross-attention
        # this rank's share of the tokens and every head (23 and 22 of 45)
        for rank, share in enumerate((23, 22)):
            assert shapes(tmp_path / f"calls-rank{rank}") == {
                (batch, tokens, heads // RANKS, head_dim),
                (batch, share, heads, head_dim),
            }
