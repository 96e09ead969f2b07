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
