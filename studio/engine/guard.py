"""The engine's text guardrail: a blocklist of terms matched on word boundaries, case-insensitively, in text
normalised so that invisible and look-alike characters do not get a term past it."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

BLOCKED_MESSAGE = "Input was blocked by the engine's guardrails (matched a blocked term: {term!r})."

# Letters of other scripts that look like Latin ones (after NFKC, which already folds fullwidth and mathematical
# letters): Cyrillic, Greek and Armenian look-alikes, and Latin's own variants (script g, dotless i, small
# capitals). Capitals are listed too: some of them look Latin only as capitals (Greek Β, Η, Ρ; Cyrillic В, Н).
# A short table of the common ones from Unicode's confusables (UTS #39), not all of it.
_LOOK_ALIKES = {
    # Cyrillic
    "а": "a", "в": "b", "е": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
    "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "һ": "h", "ԁ": "d", "ԛ": "q",
    "ԝ": "w", "ӏ": "l", "ү": "y", "ԍ": "g",
    "А": "a", "В": "b", "Е": "e", "К": "k", "М": "m", "Н": "h", "О": "o", "Р": "p", "С": "c", "Т": "t",
    "У": "y", "Х": "x", "Ѕ": "s", "І": "i", "Ј": "j", "Ԛ": "q", "Ԝ": "w", "Ӏ": "l", "Ү": "y", "Һ": "h",
    # Greek
    "α": "a", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x",
    "ϲ": "c", "ϳ": "j",
    "Α": "a", "Β": "b", "Ε": "e", "Ζ": "z", "Η": "h", "Ι": "i", "Κ": "k", "Μ": "m", "Ν": "n", "Ο": "o",
    "Ρ": "p", "Τ": "t", "Υ": "y", "Χ": "x", "Ϲ": "c", "Ϳ": "j",
    # Armenian
    "օ": "o", "ս": "u", "հ": "h", "ո": "n", "ց": "g", "զ": "q",
    # Latin variants
    "ɡ": "g", "ı": "i", "ȷ": "j", "ɑ": "a", "ɩ": "i", "ʏ": "y", "ᴀ": "a", "ᴄ": "c", "ᴅ": "d", "ᴇ": "e", "ᴋ": "k",
    "ᴍ": "m", "ᴏ": "o", "ᴘ": "p", "ᴛ": "t", "ᴜ": "u", "ᴠ": "v", "ᴡ": "w", "ᴢ": "z", "ꜱ": "s", "ʀ": "r",
    "ɢ": "g", "ʜ": "h", "ɪ": "i", "ʟ": "l", "ɴ": "n",
}  # fmt: skip
_FOLD = str.maketrans(_LOOK_ALIKES)
# Blank letters that show as nothing and are no format characters (Hangul fillers).
_BLANKS = dict.fromkeys(map(ord, "\u115f\u1160\u3164\uffa0"))
_SPACES = re.compile(r"\s+")


def _visible(char: str) -> bool:
    """False for what draws nothing within a word: format characters (soft hyphen, zero-width space and joiners,
    word joiner, byte-order mark, bidirectional controls, tags) and combining marks that belong to no letter."""
    return unicodedata.category(char) not in ("Cf", "Mn", "Me")


def normalise(text: str) -> str:
    """The text as the blocklist is matched against it: compatibility forms folded (NFKC: fullwidth, ligatures,
    mathematical letters, non-breaking spaces), invisible characters dropped, look-alike letters folded to Latin,
    case folded, dashes made "-", and runs of spaces made one.

    A letter with a diacritic stays that letter (é, ö): NFKC first joins each combining mark to the letter it
    belongs to, and only the marks left over (stacked or overlaid decoration that forms no letter) are dropped.
    So Turkish "göre" is not read as "gore", while "g\u0335o\u0335r\u0335e\u0335" is."""
    text = "".join(char for char in unicodedata.normalize("NFKC", text) if unicodedata.category(char) != "Cf")
    text = unicodedata.normalize("NFKC", text.translate(_BLANKS)).translate(_FOLD).casefold().translate(_FOLD)
    # Case folding can leave marks that compose with nothing (İ becomes i and a combining dot): compose again.
    text = "".join(char for char in unicodedata.normalize("NFC", text) if _visible(char))
    text = "".join("-" if unicodedata.category(char) == "Pd" or char == "\u2212" else char for char in text)
    return _SPACES.sub(" ", text).strip()


@dataclass(frozen=True)
class GuardVerdict:
    allowed: bool
    term: str | None = None

    @property
    def message(self) -> str:
        return "" if self.allowed else BLOCKED_MESSAGE.format(term=self.term)


class TextGuard:
    """Blocks prompts that contain a listed term, with terms and prompts normalised alike (`normalise`)."""

    def __init__(self, terms: list[str]):
        self.terms = [folded for folded in map(normalise, terms) if folded]
        alternatives = "|".join(re.escape(term) for term in sorted(set(self.terms), key=len, reverse=True))
        self._pattern = re.compile(rf"(?<!\w)({alternatives})(?!\w)") if alternatives else None

    @classmethod
    def from_file(cls, path: Path) -> TextGuard:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        return cls([line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")])

    def check(self, *texts: str | None) -> GuardVerdict:
        if self._pattern is None:
            return GuardVerdict(True)
        for text in texts:
            if not text:
                continue
            match = self._pattern.search(normalise(text))
            if match:
                return GuardVerdict(False, match.group(1))
        return GuardVerdict(True)
