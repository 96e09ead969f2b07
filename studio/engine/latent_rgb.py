"""A VAE's latents as RGB without its decoder: a linear map per latent channel (3 x C weights and a bias), fitted
to what the decoder makes (studio.engine.latent_rgb_fit, scripts/fit_latent_rgb.py), and which VAE it was fitted
for (a fingerprint of its configuration and weights).

A map is a JSON file:

    {"format": 1, "fingerprint": "...", "weights": [[...C], [...C], [...C]], "bias": [r, g, b],
     "rmse": 12.3, "samples": 4096, "note": "..."}

`weights` and `bias` take the pipeline's latents (normalised, as the denoiser makes them) to 0-255 levels;
`rmse` is the fit's error against the decoder's own output on the latent grid, in 0-255 levels. The engine looks
for a map of its VAE's fingerprint in `assets/latent_rgb/`, then in its compile cache's folder, and fits one at
start-up where neither has it (`map_for_vae`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from studio.config import ASSETS_DIR
from studio.engine.latent_rgb_fit import fit_vae

log = logging.getLogger(__name__)

FORMAT = 1
LATENT_RGB_DIR = ASSETS_DIR / "latent_rgb"
# Under a compile cache's root: the maps fitted at start-up, one file per fingerprint.
CACHE_FOLDER = "latent-rgb"


@dataclass(frozen=True)
class LatentRgbMap:
    """RGB (0-255 levels) = weights @ latent + bias, per latent position."""

    weights: list[list[float]]  # 3 x C
    bias: list[float]  # 3
    rmse: float
    fingerprint: str
    samples: int = 0
    note: str = ""

    @property
    def channels(self) -> int:
        return len(self.weights[0])

    def tensors(self, device: str | torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights (3, C), bias (3,)) as float32 on `device`."""
        return (
            torch.tensor(self.weights, dtype=torch.float32, device=device),
            torch.tensor(self.bias, dtype=torch.float32, device=device),
        )

    def to_json(self) -> str:
        """The file's text: one line per field, a row of weights per line."""
        rows = ",\n  ".join(json.dumps([round(w, 6) for w in row]) for row in self.weights)
        fields = [
            f'"format": {FORMAT}',
            f'"fingerprint": {json.dumps(self.fingerprint)}',
            f'"weights": [\n  {rows}\n ]',
            f'"bias": {json.dumps([round(b, 4) for b in self.bias])}',
            f'"rmse": {round(self.rmse, 3)}',
            f'"samples": {self.samples}',
            f'"note": {json.dumps(self.note)}',
        ]
        return "{\n " + ",\n ".join(fields) + "\n}\n"

    @classmethod
    def from_json(cls, text: str) -> LatentRgbMap:
        body = json.loads(text)
        if body.get("format") != FORMAT:
            raise ValueError(f"latent RGB map of format {body.get('format')!r}, this engine reads {FORMAT}")
        weights, bias = body["weights"], body["bias"]
        if len(weights) != 3 or len(bias) != 3 or len({len(row) for row in weights}) != 1:
            raise ValueError("a latent RGB map has 3 rows of weights, all as long, and 3 biases")
        return cls(
            weights=[[float(w) for w in row] for row in weights],
            bias=[float(b) for b in bias],
            rmse=float(body.get("rmse", float("nan"))),
            fingerprint=str(body["fingerprint"]),
            samples=int(body.get("samples", 0)),
            note=str(body.get("note", "")),
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(self.to_json())
        partial.replace(path)


def project(latents: torch.Tensor, weights: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Latents (R, C, H, W) -> uint8 RGB (R, H, W, 3) through the map's tensors (on the latents' device)."""
    rgb = torch.einsum("rchw,kc->rhwk", latents.float(), weights) + bias
    return rgb.clamp_(0.0, 255.0).round_().to(torch.uint8)


def vae_config(vae: Any) -> dict[str, Any]:
    """The VAE's configuration as its fingerprint sees it: its class and its fields, less diffusers' bookkeeping
    (its version, where it was loaded from)."""
    config = {key: value for key, value in dict(vae.config).items() if not key.startswith("_")}
    return {"class": type(vae).__name__, **config}


def vae_fingerprint(vae: Any) -> str:
    """The VAE's configuration and weights, hashed. The weights are hashed as bfloat16, so that the VAE loaded in
    float32 on a CPU and in bfloat16 on a GPU is the same VAE."""
    digest = hashlib.sha256(json.dumps(vae_config(vae), sort_keys=True, default=str).encode())
    with torch.inference_mode():
        for name, tensor in sorted(vae.state_dict().items()):
            digest.update(f"{name}:{tuple(tensor.shape)}\0".encode())
            if tensor.is_floating_point():
                tensor = tensor.to(torch.bfloat16).view(torch.int16)
            digest.update(tensor.detach().contiguous().cpu().numpy())
    return digest.hexdigest()


def find_map(fingerprint: str, folders: Iterable[Path]) -> tuple[LatentRgbMap, Path] | None:
    """The first map of this fingerprint in `folders`, and its file; a file that cannot be read is skipped."""
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.json")):
            try:
                found = LatentRgbMap.from_json(path.read_text())
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("latent RGB map %s cannot be read (%s): skipped", path, exc)
                continue
            if found.fingerprint == fingerprint:
                return found, path
    return None


def fitted_map(vae: Any, fingerprint: str, note: str = "", clips: torch.Tensor | None = None) -> LatentRgbMap:
    """A map fitted now from the VAE's own decoder (on `clips`, or the fit's own procedural ones)."""
    fit = fit_vae(vae, clips)
    return LatentRgbMap(
        weights=fit.weights.tolist(),
        bias=fit.bias.tolist(),
        rmse=fit.rmse,
        fingerprint=fingerprint,
        samples=fit.samples,
        note=note,
    )


def map_for_vae(vae: Any, cache_root: Path | None, folders: Iterable[Path] = (LATENT_RGB_DIR,)) -> LatentRgbMap:
    """The map of this VAE: one whose fingerprint matches, from `folders` or the cache; else fitted now from the
    VAE's own decoder, and kept in the cache where there is one."""
    started = time.perf_counter()
    fingerprint = vae_fingerprint(vae)
    hashed_s = time.perf_counter() - started
    cached = cache_root / CACHE_FOLDER if cache_root is not None else None
    found = find_map(fingerprint, [*folders, *([cached] if cached is not None else [])])
    if found is not None:
        rgb_map, path = found
        log.info("previews: the latent RGB map %s fits this VAE (fingerprint hashed in %.2f s)", path, hashed_s)
        return rgb_map
    started = time.perf_counter()
    rgb_map = fitted_map(vae, fingerprint, note="fitted at the engine's start-up")
    fitted_s = time.perf_counter() - started
    where = "not kept (no compile cache)"
    if cached is not None:
        path = cached / f"{fingerprint[:32]}.json"
        try:
            rgb_map.save(path)
            where = f"kept in {path}"
        except OSError as exc:
            where = f"not kept ({exc})"
    log.info(
        "previews: no latent RGB map matches this VAE; fitted one from %d latents of its decoder in %.1f s "
        "(error %.1f levels of 255; fingerprint hashed in %.2f s), %s",
        rgb_map.samples,
        fitted_s,
        rgb_map.rmse,
        hashed_s,
        where,
    )
    return rgb_map
