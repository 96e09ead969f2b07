"""The engine's text guardrail: a blocklist of terms matched on word boundaries, case-insensitively, in text
normalised so that invisible and look-alike characters do not get a term past it.

Look-alikes are folded with Unicode's own confusables data (UTS #39, confusables.txt, as the package
confusable-homoglyphs ships it), not with a table of our own: each character is replaced by its prototype, the
character it is drawn like (Cherokee Ꮐ by G, sideways ᴑ by o, Abkhasian ҽ by e), as UTS #39's skeleton does. Only
prototypes made of ASCII letters and digits are used (with marks drawn on them): the blocklist's terms are plain
words, and a prototype of another script could never complete one."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

BLOCKED_MESSAGE = "Input was blocked by the engine's guardrails (matched a blocked term: {term!r})."

# Blank letters that show as nothing and are no format characters (Hangul fillers).
_BLANKS = dict.fromkeys(map(ord, "\u115f\u1160\u3164\uffa0"))
_SPACES = re.compile(r"\s+")
# confusables.txt marks right-to-left characters with left-to-right marks around them; they are no part of it.
_LRM = "\u200e"


def _is_mark(char: str) -> bool:
    return unicodedata.category(char).startswith("M")


def _is_prototype(target: str, of: str) -> bool:
    """Whether `target` is the prototype of the character `of` (rather than a character drawn like it), and one
    made of ASCII letters and digits with marks on them."""
    base = "".join(char for char in target if not _is_mark(char))
    if not (base.isascii() and base.isalnum()):
        return False
    if len(target) > 1 or not of.isascii():
        return True
    if of.isalpha():
        return False  # a capital is case folded first (I is read as i, not as l); a small letter is a prototype
    return target.isalpha()  # a digit or a symbol drawn like a letter (0 like O, | like l)


@cache
def _prototypes() -> tuple[dict[int, str], dict[int, str]]:
    """Two translation tables, built once from Unicode's confusables: (letters, symbols). Each maps a character to
    its prototype, case folded, where that is ASCII letters and digits with marks on them; `letters` holds the
    letters, digits and marks (and ASCII's own: m is drawn like rn, 0 like o, 1 like l), `symbols` the
    punctuation and symbols drawn like letters (∣ like l, ℮ like e, ⍺ like a)."""
    from confusable_homoglyphs.utils import load  # here: read only where a guard is made

    # The data holds every pair both ways (source and prototype, each listed under the other): which of two is the
    # prototype is known by UTS #39's own rules (a sequence is never a source: m is drawn like rn), and for the
    # prototypes used here: ASCII rather than another script, and a letter rather than a digit (0 like O, 1 like l).
    found: dict[str, str] = {}
    for key, entries in load("confusables.json").items():
        char = key.strip(_LRM)
        if len(char) != 1:
            continue
        prototypes = {target for entry in entries if _is_prototype(target := entry["c"].strip(_LRM), of=char)}
        if len(prototypes) == 1:
            found[char] = prototypes.pop()
    ascii_own = {char: target.casefold() for char, target in found.items() if char.isascii() and char.isalnum()}

    def fold(target: str) -> str:
        # A prototype written in capitals (G) is matched as its small letter, and ASCII's own look-alikes
        # (m as rn) are read the same way in the prototype as in the text.
        return "".join(ascii_own.get(c, c) for c in target.casefold())

    letters: dict[int, str] = {}
    symbols: dict[int, str] = {}
    for char, target in found.items():
        # A capital drawn like a Latin capital is read as that capital (Greek Ν as N); one drawn like a small letter
        # is read as its own small letter, so that case stays out of it: Greek Ι as ι (i), not as the l that
        # Unicode draws a capital I like.
        small = char.casefold()
        if small != char and len(small) == 1 and small in found and not target.isupper():
            target = found[small]
        table = letters if unicodedata.category(char)[0] in "LNM" else symbols
        table[ord(char)] = fold(target)
    return letters, {**letters, **symbols}


def _visible(char: str) -> bool:
    """False for what draws nothing within a word: format characters (soft hyphen, zero-width space and joiners,
    word joiner, byte-order mark, bidirectional controls, tags) and combining marks that belong to no letter."""
    return unicodedata.category(char) not in ("Cf", "Mn", "Me")


def normalise(text: str, symbols_as_letters: bool = False) -> str:
    """The text as the blocklist is matched against it: compatibility forms folded (NFKC: fullwidth, ligatures,
    mathematical letters, non-breaking spaces), invisible characters dropped, case folded, each letter replaced by
    its prototype (UTS #39's skeleton: NFD, each character by its prototype, then composed again), dashes made "-",
    and runs of spaces made one. `symbols_as_letters`: symbols drawn like letters are read as those letters too
    (∣ as l); else they stay symbols, and so keep ending a word.

    A letter with a diacritic stays that letter (é, ö): only its base letter is folded, and only the marks left
    over (stacked or overlaid decoration that forms no letter) are dropped. So Turkish "göre" is not read as
    "gore", while "g\u0335o\u0335r\u0335e\u0335" is."""
    letters, with_symbols = _prototypes()
    table = with_symbols if symbols_as_letters else letters
    text = "".join(char for char in unicodedata.normalize("NFKC", text) if unicodedata.category(char) != "Cf")
    text = unicodedata.normalize("NFKC", text.translate(_BLANKS))
    # Prototypes of capitals and of small letters alike: before case folding (Greek Β is B) and after it.
    text = unicodedata.normalize("NFD", text).translate(table).casefold().translate(table)
    # Compose again (a prototype's mark with its letter, İ's dot that case folding split off), then drop the marks
    # that compose with nothing.
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
    """Blocks prompts that contain a listed term, with terms and prompts normalised alike (`normalise`). A prompt is
    read twice: with symbols that look like letters as symbols, and as those letters; either reading may match."""

    def __init__(self, terms: list[str]):
        # Each term as matched (its skeleton: "bomb" is "bornb"), and as the message names it.
        self._named: dict[str, str] = {}
        for term in terms:
            folded = normalise(term)
            if folded:
                self._named.setdefault(folded, " ".join(term.split()))
        self.terms = list(self._named)
        alternatives = "|".join(re.escape(term) for term in sorted(self._named, key=len, reverse=True))
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
            for symbols_as_letters in (False, True):
                match = self._pattern.search(normalise(text, symbols_as_letters))
                if match:
                    return GuardVerdict(False, self._named[match.group(1)])
        return GuardVerdict(True)
