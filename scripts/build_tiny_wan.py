#!/usr/bin/env python
"""Build a tiny, random-weight diffusers ``WanPipeline`` (text-to-video) offline.

The pipeline is assembled entirely from configs -- no model hub access is needed
or attempted -- and written with ``save_pretrained`` to an output directory
(a few hundred KB).  All weights are RANDOM, so the generated "video" is
noise-like garbage: the model exists only as a small, fast stand-in default
(for tests, CPU demos and server wiring) until a trained model is available.

Layout is the standard diffusers Wan 2.1 T2V layout, so both
``diffusers.DiffusionPipeline.from_pretrained(DIR)`` and the vLLM-Omni server
(which detects it as a Wan pipeline via ``model_index.json``) can load it:

    DIR/model_index.json       _class_name = WanPipeline
    DIR/tokenizer/             word-level tokenizers-backed fast tokenizer
    DIR/text_encoder/          UMT5EncoderModel   (d_model 32, 2 layers)
    DIR/vae/                   AutoencoderKLWan   (base_dim 3, z_dim 16, 8x/4x)
    DIR/transformer/           WanTransformer3DModel (2 layers, 2 heads x 12)
    DIR/scheduler/             UniPC (flow-matching, as Wan) or flow Euler

Usage:

    python scripts/build_tiny_wan.py --out assets/tiny-wan
    python scripts/build_tiny_wan.py --out /tmp/tiny-wan --seed 0 --shift 3.0

The build is deterministic: the same ``--seed`` produces byte-identical files.

Notes for users of the output:
  * ``num_frames`` should be 4k+1 (WanPipeline rounds others down to 4k+1 with a
    warning); ``height``/``width`` should be multiples of 16 (8x VAE * 2 patch).
  * The tokenizer is word-level over a small fixed English vocabulary; unknown
    words map to ``<unk>``.  It is not sentencepiece, so ``tokenizer_class`` is
    ``PreTrainedTokenizerFast`` (works with transformers 4.x and 5.x).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

# Never touch the network: everything is built from configs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch

# ---------------------------------------------------------------------------
# Tiny design (kept in one place so it is easy to read / tweak)
# ---------------------------------------------------------------------------
TEXT_D_MODEL = 32
TEXT_LAYERS = 2
TEXT_HEADS = 4
TEXT_D_KV = 8
TEXT_D_FF = 64

Z_DIM = 16  # latent channels; WanPipeline uses vae.config.z_dim and len(latents_mean/std)
VAE_BASE_DIM = 3

DIT_LAYERS = 2
DIT_HEADS = 2
DIT_HEAD_DIM = 12
DIT_FFN = 32
DIT_FREQ_DIM = 256
# NOTE: rope_max_seq_len must cover the largest latent grid side after
# patchification (e.g. 832 px -> 104 latents -> 52 patches); keep Wan's 1024.
DIT_ROPE_MAX_SEQ_LEN = 1024

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"  # T5 convention: ids 0, 1, 2

# Small fixed vocabulary of lowercase English words (typical video prompts).
WORDS = """
a an the and or but of in on at to from with without by for into over under
through across along around above below near behind between while as is are
was were be being been it its this that these those there here who which what
when where how very slowly quickly gently softly bright dark light shadow
sunset sunrise morning evening night day sky cloud clouds rain snow storm wind
fog mist sun moon star stars ocean sea wave waves beach sand river lake water
waterfall mountain mountains hill valley forest tree trees leaf leaves flower
flowers grass field garden desert ice fire smoke city street road bridge car
cars train bus boat ship plane bicycle building buildings house window door
room kitchen table chair light lights lamp neon market crowd people person man
woman child children girl boy dog cat bird birds horse fish butterfly robot
astronaut dragon camera shot view close up wide aerial drone pan tilt zoom
tracking slow motion timelapse cinematic realistic photorealistic animated
cartoon style painting watercolor detailed high quality quality low blurry
blur static still moving walking running flying swimming dancing jumping
sitting standing looking smiling talking playing riding driving falling
floating glowing shining burning flowing spinning red orange yellow green blue
purple pink white black gray grey golden silver colorful warm cold soft hard
big small large tiny tall short long old young new beautiful ugly happy sad
calm busy empty quiet loud first second third one two three many few some all
every each other another same different background foreground left right top
bottom center front back side inside outside together alone again still
overexposed underexposed worst best bad good noisy clean deformed distorted
extra fingers hands face faces eyes hair subtitles text watermark logo frame
frames video image picture scene
"""


def _vocab() -> dict[str, int]:
    words = []
    seen = set()
    for w in WORDS.split():
        if w not in seen:
            seen.add(w)
            words.append(w)
    punct = list(".,!?;:'\"-()")
    vocab = {PAD: 0, EOS: 1, UNK: 2}
    for tok in sorted(words) + punct:
        if tok not in vocab:
            vocab[tok] = len(vocab)
    return vocab


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = _vocab()
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # splits words and punctuation
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)  # joins with spaces
    # T5 style: append </s> to every sequence.
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}",
        pair=f"$A {EOS} $B {EOS}",
        special_tokens=[(EOS, vocab[EOS])],
    )
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        model_max_length=512,
        padding_side="right",
        truncation_side="right",
    )
    return hf_tok, len(vocab)


def build_text_encoder(vocab_size: int):
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(
        vocab_size=vocab_size,
        d_model=TEXT_D_MODEL,
        d_kv=TEXT_D_KV,
        d_ff=TEXT_D_FF,
        num_layers=TEXT_LAYERS,
        num_decoder_layers=TEXT_LAYERS,
        num_heads=TEXT_HEADS,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=32,
        dropout_rate=0.0,
        feed_forward_proj="gated-gelu",
        tie_word_embeddings=False,
        scalable_attention=True,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
        initializer_factor=1.0,
    )
    return UMT5EncoderModel(config).eval()


def build_vae():
    from diffusers import AutoencoderKLWan

    # 3 spatial downsamples -> 8x; temporal downsample in the last two -> 4x.
    # latents_mean / latents_std: identity normalisation (random weights anyway);
    # their length must equal z_dim.
    return AutoencoderKLWan(
        base_dim=VAE_BASE_DIM,
        z_dim=Z_DIM,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        attn_scales=[],
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * Z_DIM,
        latents_std=[1.0] * Z_DIM,
        scale_factor_temporal=4,
        scale_factor_spatial=8,
    ).eval()


def build_transformer():
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=DIT_HEADS,
        attention_head_dim=DIT_HEAD_DIM,
        in_channels=Z_DIM,
        out_channels=Z_DIM,
        text_dim=TEXT_D_MODEL,
        freq_dim=DIT_FREQ_DIM,
        ffn_dim=DIT_FFN,
        num_layers=DIT_LAYERS,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        eps=1e-6,
        rope_max_seq_len=DIT_ROPE_MAX_SEQ_LEN,
    ).eval()


def build_scheduler(kind: str, shift: float):
    if kind == "unipc":
        from diffusers import UniPCMultistepScheduler

        # Same settings as the Wan2.1-T2V diffusers checkpoints.
        return UniPCMultistepScheduler(
            num_train_timesteps=1000,
            prediction_type="flow_prediction",
            use_flow_sigmas=True,
            flow_shift=shift,
            solver_order=2,
            solver_type="bh2",
            predict_x0=True,
            lower_order_final=True,
            timestep_spacing="linspace",
        )
    if kind == "euler":
        from diffusers import FlowMatchEulerDiscreteScheduler

        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    raise ValueError(f"unknown scheduler {kind!r}")


def _seeded(seed: int, offset: int) -> None:
    # Re-seed before every component so each one is independent of the others.
    torch.manual_seed(seed * 1000 + offset)


def build_pipeline(seed: int, scheduler: str, shift: float):
    from diffusers import WanPipeline

    tokenizer, vocab_size = build_tokenizer()
    _seeded(seed, 1)
    text_encoder = build_text_encoder(vocab_size)
    _seeded(seed, 2)
    vae = build_vae()
    _seeded(seed, 3)
    transformer = build_transformer()
    return WanPipeline(
        tokenizer=tokenizer,
        text_encoder=text_encoder,
        vae=vae,
        scheduler=build_scheduler(scheduler, shift),
        transformer=transformer,
    )


def _rewrite_json(path: str, fn) -> None:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data = fn(data)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")


def _portable_tokenizer_class(out: str) -> None:
    """transformers 5 records the backend class as ``TokenizersBackend``, which
    transformers 4.x cannot import.  ``PreTrainedTokenizerFast`` is the same
    class in 5.x (an alias) and the generic fast tokenizer in 4.x."""
    cls = "PreTrainedTokenizerFast"

    def fix_index(d):
        d["tokenizer"] = ["transformers", cls]
        return d

    def fix_tok_cfg(d):
        d["tokenizer_class"] = cls
        return d

    _rewrite_json(os.path.join(out, "model_index.json"), fix_index)
    tok_cfg = os.path.join(out, "tokenizer", "tokenizer_config.json")
    if os.path.exists(tok_cfg):
        _rewrite_json(tok_cfg, fix_tok_cfg)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="assets/tiny-wan", help="output directory (default: assets/tiny-wan)")
    ap.add_argument("--seed", type=int, default=0, help="weight-init seed (default: 0)")
    ap.add_argument(
        "--scheduler",
        choices=["unipc", "euler"],
        default="unipc",
        help="unipc = UniPCMultistepScheduler with flow sigmas (as Wan2.1); euler = FlowMatchEulerDiscreteScheduler",
    )
    ap.add_argument("--shift", type=float, default=3.0, help="flow shift (Wan: 3.0 for 480p, 5.0 for 720p)")
    args = ap.parse_args(argv)

    torch.use_deterministic_algorithms(True, warn_only=True)
    pipe = build_pipeline(args.seed, args.scheduler, args.shift)  # float32 throughout

    os.makedirs(args.out, exist_ok=True)
    pipe.save_pretrained(args.out, safe_serialization=True)
    _portable_tokenizer_class(args.out)
    # save_pretrained writes weight files via a temp file (mode 0600); make the
    # output readable by other users (e.g. a server running as another uid).
    for root, dirs, files in os.walk(args.out):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)

    n = {
        name: sum(p.numel() for p in getattr(pipe, name).parameters())
        for name in ("text_encoder", "vae", "transformer")
    }
    total = 0
    for root, _, files in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"wrote {args.out}: {total / 1024:.1f} KiB; params {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
