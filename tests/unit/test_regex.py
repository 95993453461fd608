"""Java patterns on Python's re: a table of (pattern, text, Java's matches()), what is
refused, and a fuzz of the translation against Python where the two engines agree."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, strategies as st

from mlstream.errors import BadRequest
from mlstream.guard.regex import compile_java, translate

from ..support.fuzz import fuzz

# (pattern, text, what java.util.regex.Matcher.matches() answers)
MATCHES = [
    # ml-commons' own tests (LocalRegexGuardrailTests, MLGuardTests, ModelGuardrailTests, RestMLGuardrailsIT)
    ("(.|\n)*stop words(.|\n)*", "\n\nHuman:hello stop words.\n\nAssistant:", True),
    ("(.|\n)*stop words(.|\n)*", "\n\nHuman:hello good words.\n\nAssistant:", False),
    ("regex1", "{\"prompt\": \"Say this is a test\"}", False),
    ("^\"\\s*[Aa]ccept\\s*\"$", "\"accept\"", True),
    ("^\"\\s*[Aa]ccept\\s*\"$", "\" Accept \"", True),
    ("^\"\\s*[Aa]ccept\\s*\"$", "\"Reject\"", False),
    ("^\"[Aa]ccept\"$", "\"Accept\"", True),
    ("^accept$", "accept", True),
    ("^\"NONE\"$", "\"NONE\"", True),           # use_bedrock_guardrails.md
    ("^\\s*[Aa]ccept.*$", "Accept it", True),
    # matches() is the whole text, find() is not asked
    ("stop", "a stop word", False),
    (".*stop.*", "a stop word", True),
    # . stops at every Java line terminator; (?s) does not
    (".*", "a\rb", False), (".*", "a\u2028b", False), (".*", "a\x85b", False),
    ("(?s).*", "a\rb", True), ("(?d).*", "a\rb", True), ("(?d).*", "a\nb", False),
    # $ before a final line terminator, but matches() must still consume it
    ("a$", "a\n", False), ("a$\n", "a\n", True), ("a$\r\n", "a\r\n", True), ("a$\r", "a\r", True),
    ("(?m)a$\nb", "a\nb", True), ("(?m)^b", "b", True), ("a\nb", "a\nb", True),
    ("a\\Z\n", "a\n", True), ("a\\z", "a", True), ("\\Aa", "a", True), ("\\Ga", "a", True),
    # Java's predefined classes are ASCII
    ("\\w+", "héllo", False), ("\\w+", "hello_1", True), ("\\d", "٣", False), ("\\s", "\u00a0", False),
    ("(?U)\\w+", "héllo", True), ("(?U)\\d", "٣", True),
    ("\\h", "\u00a0", True), ("\\v", "\u2028", True), ("\\V", "a", True), ("\\R", "\r\n", True),
    ("a\\bb", "ab", False), ("a\\b b", "a b", True), ("a\\Bb", "ab", True),
    # case-insensitivity: ASCII by default, Unicode with u
    ("(?i)hello", "HeLLo", True), ("(?i)é", "É", False), ("(?iu)é", "É", True),
    ("(?i)[a-c]+", "AbC", True), ("(?i)[^a-c]", "B", False), ("a(?i)b", "aB", True), ("a(?i)b", "AB", False),
    ("(?i:a)b", "Ab", True), ("(?i:a)b", "AB", False), ("((?i)a)b", "AB", False),
    # quoting, escapes, POSIX classes
    ("\\Qa.b\\E", "a.b", True), ("\\Qa.b\\E", "axb", False), ("\\Qa.b", "a.b", True), ("[\\Q.]\\E]+", ".]", True),
    ("\\x41\\x{42}\\u0043\\0104", "ABCD", True), ("\\uD83D\\uDE00", "\U0001F600", True),
    ("\\t\\n\\e\\a\\cA", "\t\n\x1b\x07\x01", True), ("\\N{LATIN SMALL LETTER A}", "a", True),
    ("\\p{Punct}+", "!?#", True), ("\\p{Lower}\\p{Upper}\\P{Digit}", "aB!", True), ("\\p{IsPunct}", ".", True),
    ("[\\p{Alpha}&]+", "a&b", True), ("\\p{XDigit}+", "beef", True),
    # groups, back references, quantifiers
    ("(?<w>a+)-\\k<w>", "aa-aa", True), ("(a)\\11", "aa1", True), ("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\\10", "abcdefghijj", True),
    ("(?:ab)+", "abab", True), ("a{2,3}", "aaa", True), ("a{2,3}", "aaaa", False), ("a++a", "aaa", False),
    ("(?>a+)b", "aab", True), ("a*?b", "aab", True), ("(?=a)a", "a", True), ("(?<!b)a", "a", True),
    # comments mode
    ("(?x) a b # a comment\n c", "abc", True), ("(?x)[ a ]+", "aa", True), ("(?x)a\\ b", "a b", True),
    # literals that are metacharacters in neither engine's way
    ("a]b}", "a]b}", True), ("[a-]+", "a-", True), ("[-a]+", "-a", True),
]


@pytest.mark.parametrize("pattern, text, expected", MATCHES,
                         ids=[f"{i}:{p!r}" for i, (p, _, _) in enumerate(MATCHES)])
def test_matches_like_java(pattern, text, expected):
    assert compile_java(pattern).matches(text) is expected, translate(pattern)


REFUSED = [
    ("[a-z&&[^b]]", "intersection"), ("[a[b]]", "nested character classes"),
    ("\\p{L}", "\\p{L} is not supported"), ("\\p{IsLatin}", "is not supported"), ("\\pL", "\\p{L}"),
    ("\\p{javaLowerCase}", "is not supported"), ("(?U)\\p{Alpha}", "is not supported"),
    ("\\X", "grapheme"), ("\\b{g}", "grapheme"), ("\\y", "illegal or unsupported escape"),
    ("a{", "Illegal repetition"), ("{1}", "nothing to repeat"), ("[]a]", "write \\]"),
    ("(a", "unclosed group"), ("a)", "unmatched"), ("[a", "unclosed character class"),
    ("a\\", "trailing backslash"), ("\\2(a)", "names no group"), ("(?P<n>a)", "unknown inline flag"),
    ("(?c)a", "unknown inline flag"), ("(?<=a+)b", "cannot be used"), ("[z-a]", "illegal character range"),
    ("\\x{110000}", "above U+10FFFF"), ("\\k<n>", "group name"), ("[\\b]", "cannot be used in a character class"),
    ("*a", "cannot be used"), ("\\N{NO SUCH NAME}", "unknown character name"),
]


@pytest.mark.parametrize("pattern, words", REFUSED, ids=[p for p, _ in REFUSED])
def test_what_cannot_be_translated_is_a_clear_400(pattern, words):
    with pytest.raises(BadRequest) as refused:
        compile_java(pattern)
    assert refused.value.http_status == 400
    assert words in refused.value.reason and pattern in refused.value.reason


def test_a_regex_must_be_a_string():
    with pytest.raises(BadRequest):
        compile_java(3)  # type: ignore[arg-type]


# --- fuzz ----------------------------------------------------------------------------------

_JAVA_ALPHABET = list("ab.*+?|()[]{}^$\\-&,:=!<>#0129xuQEpPLdwsbBkhvRzZ") + ["(?", "(?i)", "(?s)", "\\p{", "\n", " ", "é"]


@fuzz(400)
@given(st.lists(st.sampled_from(_JAVA_ALPHABET), max_size=14).map("".join))
@example("[a-")
def test_any_pattern_is_translated_or_refused_with_a_400(pattern):
    try:
        compiled = compile_java(pattern)
    except BadRequest as refused:
        assert refused.http_status == 400
        return
    compiled.matches("ab\nba")  # and what compiles can be run


# Where Java and Python agree (no line terminators in the text, no flags, ASCII, none of
# the constructs the two engines read differently), the translation must not change meaning.
_COMMON = st.recursive(
    st.sampled_from(["a", "b", "c", "[ab]", "[^a]", "[a-c]", "\\d", "\\.", "x"]),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda p: f"{p[0]}|{p[1]}"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{1,2}", "*?", "++"])).map(
            lambda p: f"(?:{p[0]}){p[1]}"),
        inner.map(lambda p: f"({p})"),
    ), max_leaves=8)


@fuzz(300)
@given(_COMMON, st.text(alphabet="abcx1.", max_size=8))
def test_translation_keeps_the_meaning_where_the_engines_agree(pattern, text):
    assert compile_java(pattern).matches(text) == (re.fullmatch(pattern, text) is not None)
