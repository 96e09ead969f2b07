"""The engine's text guardrail: a blocklist of terms matched on word boundaries, case-insensitively."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

BLOCKED_MESSAGE = "Input was blocked by the engine's guardrails (matched a blocked term: {term!r})."


@dataclass(frozen=True)
class GuardVerdict:
    allowed: bool
    term: str | None = None

    @property
    def message(self) -> str:
        return "" if self.allowed else BLOCKED_MESSAGE.format(term=self.term)


class TextGuard:
    """Blocks prompts that contain a listed term. Normalises Unicode so look-alike forms match too."""

    def __init__(self, terms: list[str]):
        self.terms = [self._normalise(term) for term in terms if term.strip()]
        alternatives = "|".join(re.escape(term) for term in sorted(set(self.terms), key=len, reverse=True))
        self._pattern = re.compile(rf"(?<!\w)({alternatives})(?!\w)") if alternatives else None

    @classmethod
    def from_file(cls, path: Path) -> TextGuard:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        return cls([line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")])

    @staticmethod
    def _normalise(text: str) -> str:
        folded = unicodedata.normalize("NFKC", text).casefold()
        return re.sub(r"\s+", " ", folded).strip()

    def check(self, *texts: str | None) -> GuardVerdict:
        if self._pattern is None:
            return GuardVerdict(True)
        for text in texts:
            if not text:
                continue
            match = self._pattern.search(self._normalise(text))
            if match:
                return GuardVerdict(False, match.group(1))
        return GuardVerdict(True)
