"""Text embeddings of prompts, kept for reuse: most requests repeat a prompt or the empty negative prompt."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch


class PromptEmbeddings:
    """The pipeline's own prompt encoding, with the last `size` prompts' embeddings kept (least recently used
    goes first)."""

    def __init__(self, size: int = 64):
        self.size = size
        self._cache: OrderedDict[str, torch.Tensor] = OrderedDict()

    def embed(self, pipe: Any, texts: list[str], max_sequence_length: int, device: str) -> torch.Tensor:
        """Text embeddings (len(texts), L, D) in the transformer's dtype, from the cache where it has them."""
        missing = list(dict.fromkeys(text for text in texts if text not in self._cache))
        if missing:
            embeds, _ = pipe.encode_prompt(
                prompt=missing,
                do_classifier_free_guidance=False,
                max_sequence_length=max_sequence_length,
                device=device,
            )
            embeds = embeds.to(pipe.transformer.dtype)
            for text, row in zip(missing, embeds, strict=True):
                self._cache[text] = row
        rows = []
        for text in texts:
            self._cache.move_to_end(text)
            rows.append(self._cache[text])
        stacked = torch.stack(rows)
        while len(self._cache) > max(self.size, len(texts)):
            self._cache.popitem(last=False)
        return stacked

    def forget(self, which: Callable[[str], bool]) -> None:
        for text in [text for text in self._cache if which(text)]:
            del self._cache[text]
