import pytest

from studio.config import DEFAULT_BLOCKLIST
from studio.engine.guard import TextGuard


def test_blocklist_matches_words_case_insensitively():
    guard = TextGuard(["gore", "terrorist attack"])
    assert not guard.check("GORE in the street").allowed
    assert not guard.check("a  Terrorist   Attack").allowed
    assert guard.check("a gorgeous sunset").allowed  # word boundaries, not substrings
    verdict = guard.check("fine", "gore")
    assert verdict.term == "gore" and "blocked" in verdict.message and "guardrail" in verdict.message


def test_default_blocklist_loads_and_ignores_comments():
    guard = TextGuard.from_file(DEFAULT_BLOCKLIST)
    assert guard.terms and all(not term.startswith("#") for term in guard.terms)
    assert guard.check("a red circle moving left").allowed


# ---- look-alike and invisible characters ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "prompt",
    [
        "go\u00adre",  # a soft hyphen inside the word
        "go\u200bre",  # a zero-width space
        "g\u200do\u2060r\ufeffe",  # zero-width joiner, word joiner, byte-order mark
        "g\u043ere",  # Cyrillic о
        "g\u03bfre",  # Greek omicron
        "GOR\u0415",  # Cyrillic capital Е
        "G\u039fRE",  # Greek capital Omicron
        "\uff47\uff4f\uff52\uff45",  # fullwidth ｇｏｒｅ
        "\U0001d420\U0001d428\U0001d42b\U0001d41e",  # mathematical bold 𝐠𝐨𝐫𝐞
        "g\u0335o\u0335r\u0335e\u0335",  # combining overlays that compose with nothing
        "\u0261ore",  # Latin small script g
        "a scene full of g\u043e\u200bre",
        "bomb\u2010making",  # Unicode hyphen in a hyphenated term
        "self\u2011harm",  # non-breaking hyphen
        "terrorist\u00a0attack",  # no-break space
        # Look-alikes that Unicode's confusables (UTS #39) name and a short table of our own did not
        "\u13c0\u13be\u13a1\u13ac",  # Cherokee ᏀᎾᎡᎬ
        "g\u1d11re",  # Latin small letter sideways o
        "gor\u04bd",  # Cyrillic small letter Abkhasian che
        "\u0392\u039f\u039c\u0392-\u039c\u0391\u039a\u0399\u039dG",  # Greek capitals: ΒΟΜΒ-ΜΑΚΙΝG
        "NAZ\u0399",  # Greek capital iota, read as i whatever its case
        "bo\U00011700b-making",  # Ahom ka, drawn like rn (and m like rn too)
        "gor\u212e",  # the estimated symbol, drawn like e
        "gore\u2223",  # a symbol drawn like l after the word still ends it
        "g0re",  # a digit zero, drawn like o
    ],
)
def test_look_alike_and_invisible_characters_do_not_get_around_the_blocklist(prompt):
    verdict = TextGuard.from_file(DEFAULT_BLOCKLIST).check(prompt)
    assert not verdict.allowed, prompt


@pytest.mark.parametrize(
    "prompt",
    [
        "a gorgeous sunset over the sea",
        "a gorilla in a forest",
        "a bomber jacket on a chair",
        "an ultrasound",
        "Hamburg at night",
        "a red circle moving left on a white background",
        "crème brûlée in a café",
        "bu resme göre bir kedi",  # Turkish "according to": a letter with its diacritic is another letter
        "привет мир, горы и море",  # Cyrillic text stays Cyrillic where it is no look-alike of a term
        "καλημέρα κόσμε",
        "日本の夏祭り",
        "a zero\u200bwidth space between two harmless words",
        "a corn field in the year 2000",
        "\u13a3\u13cd\u13d7",  # Cherokee ᎣᏍᏗ ("good")
        "a sideways \u1d11 and \u212e on a sign",
    ],
)
def test_ordinary_text_in_any_script_is_still_allowed(prompt):
    verdict = TextGuard.from_file(DEFAULT_BLOCKLIST).check(prompt)
    assert verdict.allowed, (prompt, verdict.term)


def test_terms_written_with_look_alikes_match_plain_prompts():
    guard = TextGuard(["g\u043ere", "\uff4e\uff41\uff5a\uff49"])
    assert not guard.check("gore").allowed and not guard.check("NAZI").allowed
    assert guard.check("a gorgeous nazirite").allowed


def test_the_term_named_is_the_term_as_listed():
    guard = TextGuard(["bomb-making", "self-harm"])
    assert guard.check("\u0392omb-making").term == "bomb-making"  # matched on its skeleton, named as written
    assert guard.check("SELF-HAR\u039c").term == "self-harm"
