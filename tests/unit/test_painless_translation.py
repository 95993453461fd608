"""The Python translation of a script (``painless.pysource``) against the closures
(``painless.runtime``), the reference: on every script and input, the same value, or
the same error naming the same line, budgets included."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlstream.errors import ScriptError
from mlstream.painless import BUILTINS, Limits, Script, compile_script, parse, pysource
from mlstream.painless.pysource import translate
from mlstream.painless.runtime import compile_program

from ..support.fuzz import fuzz
from ..support.painless import EXPRESSIONS, FRAGMENTS, PARAMS, POST_CASES, SMALL


def both(source: str) -> tuple[Script, Script]:
    """(the closures, the translation) of ``source``."""
    program = parse(source)
    closures = compile_program(program, BUILTINS)
    translated = translate(program, BUILTINS)
    assert translated is not None, source
    return Script(source, closures), Script(source, closures.translated_to(translated))


def outcome(script: Script, params: Any, limits: Limits) -> tuple[str, Any]:
    try:
        return "value", script.run(copy.deepcopy(params), limits)
    except ScriptError as error:
        return "error", error.reason


def agree(source: str, params: Any, limits: Limits = SMALL) -> tuple[str, Any]:
    closures, translated = both(source)
    expected = outcome(closures, params, limits)
    assert outcome(translated, params, limits) == expected, source
    return expected


# ------------------------------------------------------------------ chosen cases

CASES = [
    # loops: for with continue runs the update; do runs once; break leaves the inner loop only
    ("def s = ''; for (int i = 0; i < 5; i++) { if (i % 2 == 0) { continue; } s += i; } return s;", {}),
    ("int n = 0; do { n++; } while (n < 0); return n;", {}),
    ("def s = ''; for (int i = 0; i < 3; i++) { for (int j = 0; j < 3; j++) { if (j == 1) break; s += i + ':' + j + ' '; } } return s;", {}),
    ("def s = ''; int i = 0; while (i < 4) { i++; if (i == 2) continue; s += i; } return s;", {}),
    ("def s = ''; for (def x : params.v) { if (x == null) continue; s += x; } return s;", {"v": [1, None, "a"]}),
    ("def s = ''; for (int i = 0; ; i++) { if (i > 3) { break; } s += i; } return s;", {}),
    # assignment as a value, post and pre increments, compound assignment narrowing
    ("int i = 5; int j = i++ + ++i; return i + ',' + j;", {}),
    ("def x = 1; def y = (x = 7) + x; return x + ',' + y;", {}),
    ("def x = 1; def y = x + (x = 7); return x + ',' + y;", {}),
    ("int i = 2147483647; i++; return '' + i;", {}),
    ("int i = 10; i += 2.7; return '' + i;", {}),
    ("def a = [1, 2]; a[0] += 5; a[1]++; return a.toString();", {}),
    ("def m = ['k': 1]; m.k += 2; def old = m.k++; return old + ' ' + m.k;", {}),
    ("def l = [3]; def i = 0; l[i++] = i; return l.toString() + i;", {}),
    # arithmetic fast paths and their edges
    ("return (2147483647 * 2) + ',' + (params.x - 1) + ',' + (params.y * 2);", {"x": -2147483648, "y": 0.5}),
    ("return (params.x * params.x) + ',' + (params.x - params.y);", {"x": 3_000_000_000, "y": 1}),
    ("return (params.x < params.y) + ',' + (params.x >= 2) + ',' + (params.y <= 2.5);", {"x": 2, "y": 2.5}),
    ("return params.a == params.b;", {"a": 1, "b": 1.0}),
    ("return (params.a != params.b) + ',' + (params.a == null) + ',' + (null != params.b);", {"a": "x", "b": "x"}),
    ("return 1 + 2 + 'a' + 1 + 2;", {}),
    ("double d = 0.1; return d + d + d;", {}),
    # methods: a constant receiver, null-safe calls, append of each kind
    ("return 'FLOAT32'.equals(params.k) + ',' + 'ab'.length() + ',' + 'abc'.substring(1);", {"k": "FLOAT32"}),
    ("return 'x'.equals(params.k);", {"k": None}),
    ("def n = params.missing; return n?.length() + ',' + n?.foo;", {}),
    (("def sb = new StringBuilder(); sb.append(1).append(0.5f).append(0.1).append(true).append(null).append('c')"
     ".append([1.5, 2.5]).append(params.v); return sb.toString();"), {"v": {"a": [1, 2]}}),
    (("def sb = new StringBuilder('['); for (def x : params.v) { sb.append(x.floatValue()); sb.append(','); } "
     "return sb.toString();"), {"v": [0.1, 1e-7, 123456789.0, -0.0, 1.0e10]}),
    # a number's conversions, inline for a JSON int or double, else the whitelist's
    (("def s = ''; for (def x : params.v) { s += x.intValue() + ' ' + x.floatValue() + ' ' + x.doubleValue() + ';'; }"
     " return s;"), {"v": [1, -7, 2**31, 2**40 + 5, 0.1, -2.5e-5, 1e300, 3.9, -3.9]}),
    ("def x = params.s; return x.intValue();", {"s": "1"}),
    ("double d = 0.0 / 0.0; float f = 1e39; return d.intValue() + ' ' + f + ' ' + (1.0 / 0.0).intValue();", {}),
    # user functions: recursion, typed parameters and returns, the line of a failure inside
    ("int f(int n) { if (n <= 1) { return 1; } return n * f(n - 1); } return '' + f(10);", {}),
    ("String g(def x) {\n return x.foo();\n}\n def a = 1;\n return g(a);", {}),
    ("int h(def x) { if (x) { return 1; } } return h(false);", {}),
    ("int d(int n) { return d(n + 1); } return d(0);", {}),
    ("void v(def l) { l.add(1); } def l = []; v(l); v(l); return l.size();", {}),
    ("def f(int a) { return a; } return f('x');", {}),
    # errors: each with its line
    ("def a = 1;\n def b = params.v[5];\n return b;", {"v": [1]}),
    ("def a = 1;\n\n throw new IllegalArgumentException('no');", {}),
    ("def a = params.x;\n return a.length();", {}),
    ("return 1 / 0;", {}),
    ("def x = 'a';\n if (x) { return 1; }", {}),
    ("def l = [1];\n for (def v : params.m) { }", {"m": {"a": 1}}),
    # budgets: the same step, the same size, the same line
    ("int i = 0;\n while (true) {\n i++;\n }", {}),
    ("def s = 'x';\n while (true) {\n s = s + s;\n }", {}),
    ("def sb = new StringBuilder();\n for (int i = 0; i < 100000; i++) {\n sb.append('0123456789');\n }", {}),
    ("int f(int n) {\n return n < 1000 ? f(n + 1) : n;\n }\n return f(0);", {}),
    # values of other kinds
    ("def m = [:]; m.put('a', [1, 2]); m['b'] = 'c'; return m.toString() + m.size();", {}),
    ("def a = new int[3]; a[1] = 7; return a[1] + a.length;", {}),
    ("def x = params.y ?: 'default'; return x + (params.z instanceof String);", {"z": "s"}),
    ("long l = 1L << 40; return l + (int) 3.9 + (params.x > 0 ? 'p' : 'n');", {"x": 1}),
    ("return params.v.stream;", {"v": []}),
]


@pytest.mark.parametrize("source, params", CASES)
def test_the_translation_runs_as_the_closures_do(source: str, params: dict[str, Any]) -> None:
    agree(source, params)


@pytest.mark.parametrize("source, answer", [c[2:4] for c in POST_CASES], ids=[f"{c[0]}:{c[1]}" for c in POST_CASES])
def test_the_published_styles_translate_exactly(source: str, answer: Any) -> None:
    agree(source, answer, Limits())


def test_a_script_nested_past_the_translation_runs_as_closures() -> None:
    deep = "return '' + " + "(" * 30 + "1" + " + 1)" * 30 + ";"
    assert compile_script(deep).run({}) == "31"
    chain = "def x = 'a'; return " + " + ".join(["x"] * 600) + ";"
    assert translate(parse(chain), BUILTINS) is None
    assert compile_script(chain).run({}) == "a" * 600


def test_nothing_a_script_says_becomes_python() -> None:
    source = ("String MAX(def S) { return S + '\\'\\\\'; } "
              "def __import__ = 'os'; def exec = '\"); raise SystemExit(\"'; def B = params; "
              "return __import__ + exec + MAX(B.x) + 'C0' + '\x00';")
    closures, translated = both(source)
    expected = ("value", 'os"); raise SystemExit("y' + "'\\C0\x00")
    assert outcome(translated, {"x": "y"}, SMALL) == outcome(closures, {"x": "y"}, SMALL) == expected



@fuzz(300)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40),
       st.dictionaries(st.sampled_from(["v", "x", "text_docs"]), PARAMS, max_size=3))
def test_fragment_soup_runs_the_same_both_ways(fragments: list[str], params: dict[str, Any]) -> None:
    source = "".join(fragments)
    try:
        compile_program(parse(source), BUILTINS)
    except (ScriptError, RecursionError):
        return
    agree(source, params)


@fuzz(300)
@given(st.lists(EXPRESSIONS, min_size=1, max_size=3),
       st.fixed_dictionaries({"x": PARAMS, "y": PARAMS, "v": PARAMS, "m": PARAMS}))
def test_expressions_over_any_values_the_same_both_ways(expressions: list[str], params: dict[str, Any]) -> None:
    agree("def r = ''; " + " ".join(f"r += {e};" for e in expressions) + " return r;", params)


# ------------------------------------------------------------------ generated programs

NAMES = ["a", "b", "c"]
LEAVES = st.sampled_from(["a", "b", "c", "i", "0", "1", "2", "-1", "2147483647", "0.5", "'s'", "null", "true",
                          "params.x", "params.v", "params.v[0]", "params.v.length", "sb.length()"])


def _expression(depth: int) -> st.SearchStrategy[str]:
    if depth == 0:
        return LEAVES
    inner = _expression(depth - 1)
    return st.one_of(
        LEAVES,
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||"]),
                  inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(NAMES), st.sampled_from(["=", "+=", "-=", "*="]), inner)
          .map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(NAMES + ["i"]), st.sampled_from(["++", "--"]), st.booleans())
          .map(lambda t: f"({t[1]}{t[0]})" if t[2] else f"({t[0]}{t[1]})"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]} ?: {t[1]})"),
        inner.map(lambda e: f"f({e})"),
        inner.map(lambda e: f"'FLOAT32'.equals({e})"),
        inner.map(lambda e: f"[{e}, 1]"),
        st.tuples(inner, inner).map(lambda t: f"params.v[{t[0]}] = {t[1]}"),
        inner.map(lambda e: f"sb.append({e})"),
        inner.map(lambda e: f"sb.append('[' + {e} + ']')"),
        inner.map(lambda e: f"{e}?.toString()"),
    )


EXPRESSION = _expression(2)


def _statements(depth: int) -> st.SearchStrategy[str]:
    simple = st.one_of(
        EXPRESSION.map(lambda e: f"{e};"),
        st.tuples(st.sampled_from(NAMES), EXPRESSION).map(lambda t: f"{t[0]} = {t[1]};"),
        EXPRESSION.map(lambda e: f"if ({e}) {{ return {e}; }}"),
        st.sampled_from(["break;", "continue;", "i++;", "sb.append(',');"]),
    )
    if depth == 0:
        return simple
    body = st.lists(_statements(depth - 1), max_size=4).map(lambda items: " ".join(items))
    return st.one_of(
        simple,
        st.tuples(EXPRESSION, body, body).map(lambda t: f"if ({t[0]}) {{ {t[1]} }} else {{ {t[2]} }}"),
        st.tuples(st.integers(0, 4), body).map(lambda t: f"for (int k = 0; k < {t[0]}; k++) {{ i++; {t[1]} }}"),
        st.tuples(st.integers(0, 4), body).map(
            lambda t: f"int w{t[0]} = 0; while (w{t[0]}++ < {t[0]}) {{ {t[1]} }}"),
        body.map(lambda b: f"for (def e : params.v) {{ a = e; {b} }}"),
    )


@fuzz(300)
@given(st.lists(_statements(2), max_size=6), st.sampled_from(NAMES), PARAMS, PARAMS)
def test_generated_programs_run_the_same_both_ways(statements: list[str], result: str, x: Any, v: Any) -> None:
    body = " ".join(statements)
    source = ("def f(def n) { return n == null ? 0 : n; } "
              "def a = 1; def b = 'b'; def c = 0.25; int i = 0; def sb = new StringBuilder(); "
              f"for (int loop = 0; loop < 2; loop++) {{ {body} }} return {result} + '|' + sb;")
    try:
        compile_program(parse(source), BUILTINS)
    except ScriptError:
        return   # e.g. "break" outside a loop; the closures refused it
    agree(source, {"x": x, "v": v if isinstance(v, list) else [v, x]})


def test_the_harness_compares_values() -> None:
    assert agree("def a = [1, 0.5]; return a.toString();", {}) == ("value", "[1, 0.5]")


def test_many_arguments_translate_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # which operands must be read into temporaries is found in one pass, not one per operand
    # (quadratic, 10,000 arguments took 48 s)
    walks = []
    original = pysource._assigns
    monkeypatch.setattr(pysource, "_assigns", lambda node: walks.append(node) or original(node))
    source = "def a = 1; def x = 'q'; return x.foo(" + ", ".join(["a"] * 2000) + ");"
    assert translate(parse(source), BUILTINS) is not None
    assert len(walks) <= 2 * 2000 + 10


def test_a_constant_compared_with_null_is_decided_when_translated() -> None:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # CPython warns of "is" with a literal
        assert agree("return '' + ('s' == null) + (1 != null) + (null == null);", {}) == ("value", "falsetruetrue")


def test_only_scripts_that_can_repeat_a_statement_are_translated() -> None:
    assert compile_script("return params.x + '!';")._compiled.translated is None
    assert compile_script("def s = ''; for (def x : params.v) { s += x; } return s;")._compiled.translated is not None
    assert compile_script("String f(def x) { return x; } return f('a');")._compiled.translated is not None


def test_one_translated_script_runs_from_many_threads_at_once() -> None:
    # the translated functions keep nothing between runs: each run has its own Budget
    # and locals, and the namespace is read only
    import sys
    import threading
    script = compile_script("def sb = new StringBuilder(); for (def x : params.v) { sb.append(x * 2).append(','); }"
                            " return sb.toString();")
    assert script._compiled.translated is not None
    failures: list[str] = []
    start = threading.Barrier(8)

    def worker(seed: int) -> None:
        start.wait(timeout=30)
        for turn in range(200):
            values = list(range(seed, seed + turn % 17))
            expected = "".join(f"{2 * v}," for v in values)
            if script.run({"v": values}) != expected:
                failures.append(f"{seed}/{turn}")
    threads = [threading.Thread(target=worker, args=(seed * 1000,)) for seed in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # threads take turns within a run, not only between runs
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads) and failures == []
