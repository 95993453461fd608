"""The Painless subset, construct by construct.

Each expected value is what Java/Painless gives for the script (int and long wrap, integer
division truncates, ``==`` is ``equals``, numbers print as ``Double.toString`` does...),
reasoned from the Java language rules and Painless' grammar (OpenSearch
``modules/lang-painless/src/main/antlr/PainlessParser.g4``). Scripts and data are our own.
"""

from __future__ import annotations

from typing import Any

import pytest

from mlstream.errors import ScriptError
from mlstream.painless import Limits, compile_script
from mlstream.painless.values import JFloat, double_to_string, float_to_string


def run(source: str, params: dict[str, Any] | None = None, limits: Limits | None = None) -> Any:
    script = compile_script(source)
    return script.run(params or {}, limits) if limits else script.run(params or {})


# (case, script, params, expected value; scripts return Strings as TemplateScript does)
CASES: list[tuple[str, str, dict[str, Any], Any]] = [
    # declarations, typed and def
    ("def", "def x = 'a'; return x", {}, "a"),
    ("typed-int", "int i = 7; return '' + i", {}, "7"),
    ("int-default", "int i; return '' + i", {}, "0"),
    ("double-from-int", "double d = 3; return '' + d", {}, "3.0"),
    ("long-literal", "long n = 5L; return '' + (n * 2)", {}, "10"),
    ("several", "int a = 1, b = 2; return '' + (a + b)", {}, "3"),
    ("def-array", "def[] xs = new def[2]; xs[0] = 'x'; return xs[0] + xs[1] + xs.length", {}, "xnull2"),
    ("typed-array-default", "double[] xs = new double[2]; return '' + xs[1]", {}, "0.0"),
    ("boxed-array-default", "def xs = new Double[1]; return '' + xs[0]", {}, "null"),
    ("initialized-array", "String[] xs = new String[] {'a', 'b'}; return xs[1] + xs.length", {}, "b2"),
    ("list-type", "List xs = new ArrayList(); xs.add(1); return '' + xs", {}, "[1]"),
    ("map-type", "Map m = new HashMap(); m.put('k', 'v'); return '' + m", {}, "{k=v}"),
    # arithmetic: Java's int, long and double
    ("int-division", "return '' + (7 / 2)", {}, "3"),
    ("negative-division", "return '' + (-7 / 2)", {}, "-3"),
    ("remainder-sign", "return '' + (-7 % 3) + ',' + (7 % -3)", {}, "-1,1"),
    ("double-division", "return '' + (7 / 2.0)", {}, "3.5"),
    ("int-overflow", "int i = 2147483647; i++; return '' + i", {}, "-2147483648"),
    ("int-multiply-wraps", "return '' + (65536 * 65536)", {}, "0"),
    ("long-no-overflow", "return '' + (65536L * 65536)", {}, "4294967296"),
    ("long-wraps", "long n = 9223372036854775807L; return '' + (n + 1)", {}, "-9223372036854775808"),
    ("double-zero-division", "return '' + (1.0 / 0) + (0.0 / 0)", {}, "InfinityNaN"),
    ("compound-narrows", "int i = 10; i += 2.7; return '' + i", {}, "12"),
    ("cast-truncates", "return '' + (int) 2.9 + (int) -2.9", {}, "2-2"),
    ("cast-long-to-int", "return '' + (int) 4294967297L", {}, "1"),
    ("float-arith", "float f = 0.1f; return '' + (f * 3)", {}, "0.3"),
    ("precedence", "return '' + (1 + 2 * 3 - 4 / 2)", {}, "5"),
    ("unary", "int i = 5; return '' + -i + ~i + (!false)", {}, "-5-6true"),
    ("shifts", "return '' + (1 << 33) + ',' + (-8 >> 1) + ',' + (-8 >>> 28)", {}, "2,-4,15"),
    ("bits", "return '' + (6 & 3) + (6 | 3) + (6 ^ 3)", {}, "275"),
    ("pre-post-increment", "int i = 1; int a = i++; int b = ++i; return '' + a + b + i", {}, "133"),
    # Java's number printing
    ("print-small", "return '' + 0.0001", {}, "1.0E-4"),
    ("print-half", "return '' + 0.5", {}, "0.5"),
    ("print-int", "return '' + 12", {}, "12"),
    ("print-whole-double", "return '' + 12.0", {}, "12.0"),
    ("print-large", "return '' + 12345678.0", {}, "1.2345678E7"),
    ("print-json-double", "return '' + params.x", {"x": 1e-05}, "1.0E-5"),
    ("print-list", "return '' + params.v", {"v": [0.5, 0.001, 1e21]}, "[0.5, 0.001, 1.0E21]"),
    ("print-null-bool", "return '' + null + true", {}, "nulltrue"),
    ("print-nested-map", "return '' + params.m", {"m": {"a": [1, {"b": None}]}}, "{a=[1, {b=null}]}"),
    ("print-float", "return '' + params.x.floatValue()", {"x": 0.1}, "0.1"),
    # concatenation: left to right, numbers add until a String appears
    ("concat-order", "return 1 + 2 + 'a' + 1 + 2", {}, "3a12"),
    ("concat-char-literal", "return 'it' + \"'s\"", {}, "it's"),
    # strings: the two escapes Painless has
    ("escapes-double", 'return "a\\"b\\\\c"', {}, 'a"b\\c'),
    ("escapes-single", "return 'a\\'b\\\\c'", {}, "a'b\\c"),
    ("newline-in-literal", "return 'a\nb'", {}, "a\nb"),
    # comparison and logic
    ("equals-is-value", "return '' + ('ab' == 'a' + 'b')", {}, "true"),
    ("numeric-equality", "return '' + (1 == 1.0) + (params.i == 2)", {"i": 2}, "truetrue"),
    ("list-equality", "return '' + ([1, 2] == [1, 2]) + ([1] === [1])", {}, "truefalse"),
    ("null-compare", "return '' + (params.missing == null) + (params.x != null)", {"x": 0}, "truetrue"),
    ("short-circuit", "return '' + (params.a != null && params.a.b == 1)", {}, "false"),
    ("ternary", "return params.n > 1 ? 'many' : 'one'", {"n": 2}, "many"),
    ("nested-ternary", "int n = 0; return n > 0 ? 'pos' : n < 0 ? 'neg' : 'zero'", {}, "zero"),
    ("elvis", "return params.x ?: 'default'", {}, "default"),
    ("elvis-keeps-value", "return params.x ?: 'default'", {"x": "given"}, "given"),
    ("null-safe", "return '' + params.a?.b?.c", {}, "null"),
    ("null-safe-call", "return '' + params.s?.length()", {}, "null"),
    ("instanceof", "return '' + (params.v instanceof List) + (params.s instanceof String)", {"v": [], "s": 1},
     "truefalse"),
    # control flow
    ("if-else", "if (params.x > 1) { return 'big' } else if (params.x > 0) { return 'small' } return 'none'",
     {"x": 1}, "small"),
    ("if-no-braces", "if (true) return 'yes'; return 'no'", {}, "yes"),
    ("c-for", "def s = ''; for (int i = 0; i < 3; i++) { s += i } return s", {}, "012"),
    ("for-each-list", "def s = ''; for (def x : params.v) { s += x } return s", {"v": ["a", "b"]}, "ab"),
    ("for-each-typed", "int t = 0; for (int x : params.v) { t += x } return '' + t", {"v": [1, 2, 3]}, "6"),
    ("for-each-keys", "def s = ''; for (String k : params.m.keySet()) { s += k } return s",
     {"m": {"x": 1, "y": 2}}, "xy"),
    ("while", "int i = 0; while (i < 5) { i += 2 } return '' + i", {}, "6"),
    ("do-while", "int i = 10; do { i++ } while (i < 5); return '' + i", {}, "11"),
    ("break-continue", "def s = ''; for (int i = 0; i < 9; i++) { if (i % 2 == 0) continue; if (i > 6) break; "
     "s += i } return s", {}, "135"),
    ("nested-loops", "int n = 0; for (int i = 0; i < 3; i++) { for (int j = 0; j < i; j++) { n++ } } return '' + n",
     {}, "3"),
    ("implicit-return", "'last ' + 1", {}, "last 1"),
    ("no-return-is-null", "def x = 1", {}, None),
    ("comments", "// one\n/* two\nlines */ return 'ok' // tail", {}, "ok"),
    # functions declared before the body
    ("function", "String twice(String s) { return s + s } return twice('ab')", {}, "abab"),
    ("recursion", "int fact(int n) { return n <= 1 ? 1 : n * fact(n - 1) } return '' + fact(10)", {}, "3628800"),
    ("function-typed-param", "double half(double x) { return x / 2 } return '' + half(3)", {}, "1.5"),
    ("void-function", "void add(List l) { l.add(1); } def l = []; add(l); return '' + l", {}, "[1]"),
    # literals and access
    ("list-literal", "def l = [1, 'a', null]; return '' + l + l.size()", {}, "[1, a, null]3"),
    ("map-literal", "def m = ['a': 1, 'b': [2]]; return '' + m.b[0] + m['a']", {}, "21"),
    ("empty-literals", "def l = []; def m = [:]; return '' + l + m + l.isEmpty()", {}, "[]{}true"),
    ("params-dot-and-brace", "return params.a + params['b'] + params.c.d + params['c']['d']",
     {"a": "1", "b": "2", "c": {"d": "3"}}, "1233"),
    ("params-hyphenated-key", "return params['x-y']", {"x-y": "v"}, "v"),
    ("list-length-field", "return '' + params.v.length + params.v.size()", {"v": [1, 2]}, "22"),
    ("list-dot-index", "return '' + params.v.1", {"v": [5, 6]}, "6"),
    ("negative-index", "return '' + params.v[-1]", {"v": [5, 6]}, "6"),
    ("map-field-write", "def m = [:]; m.k = 'v'; m['j'] = 'w'; return m.k + m.j", {}, "vw"),
    ("list-write", "def l = [1, 2]; l[0] = 9; l[1] += 1; return '' + l", {}, "[9, 3]"),
    ("keyword-like-key", "return '' + params.embeddings.float", {"embeddings": {"float": [1]}}, "[1]"),
    # StringBuilder
    ("builder", "StringBuilder b = new StringBuilder('['); b.append(1).append(',').append(2.5); b.append(']'); "
     "return b.toString() + b.length()", {}, "[1,2.5]7"),
    ("builder-concat", "def b = new StringBuilder(); b.append('x'); return '' + b + '!'", {}, "x!"),
    ("builder-insert-setlength", "def b = new StringBuilder('abc'); b.insert(0, 'z'); b.setLength(3); "
     "return b.toString()", {}, "zab"),
    # String methods
    ("string-methods", "def s = ' Hello World '; return s.trim().toLowerCase().replace('o', '0') + s.length()",
     {}, "hell0 w0rld13"),
    ("substring-indexof", "def s = 'key=value'; int i = s.indexOf('='); return s.substring(0, i) + '|' + "
     "s.substring(i + 1)", {}, "key|value"),
    ("contains-starts-ends", "def s = 'abc'; return '' + s.contains('b') + s.startsWith('a') + s.endsWith('x')",
     {}, "truetruefalse"),
    ("split", "def p = 'a,b,,c,,'.split(','); return String.join('|', p) + p.length", {}, "a|b||c4"),
    ("split-regex", "return String.join('|', ' a  b c'.split('\\\\s+'))", {}, "|a|b|c"),
    ("split-on-token", "return String.join('|', 'a::b'.splitOnToken('::'))", {}, "a|b"),
    ("equals-methods", "return '' + 'A'.equalsIgnoreCase('a') + 'a'.equals('a') + 'x'.isEmpty()", {},
     "truetruefalse"),
    ("char-at", "return 'xyz'.charAt(1)", {}, "y"),
    ("string-join-valueof", "return String.join('-', ['a', 'b']) + String.valueOf(3)", {}, "a-b3"),
    # List and Map methods
    ("list-methods", "def l = new ArrayList(); l.add('a'); l.add(0, 'b'); l.addAll(['c']); l.remove(0); "
     "return '' + l + l.contains('c') + l.indexOf('c') + l.get(0)", {}, "[a, c]true1a"),
    ("map-methods", "def m = new HashMap(); m.put('a', 1); return '' + m.containsKey('a') + m.get('b') + "
     "m.getOrDefault('b', 2) + m.size() + m.keySet() + m.values()", {}, "truenull21[a][1]"),
    ("map-remove", "def m = ['a': 1, 'b': 2]; m.remove('a'); return '' + m", {}, "{b=2}"),
    # Math and number statics
    ("math", "return '' + Math.min(3, 2) + Math.max(1.5, 1) + Math.abs(-4) + Math.round(2.5) + Math.floor(1.7)",
     {}, "21.5431.0"),
    ("math-more", "return '' + Math.sqrt(16) + Math.pow(2, 10)", {}, "4.01024.0"),
    ("parse-numbers", "return '' + (Integer.parseInt('41') + 1) + Double.parseDouble('2.5') + "
     "Long.parseLong('3')", {}, "422.53"),
    ("number-methods", "return '' + params.x.intValue() + params.y.doubleValue() + params.x.longValue()",
     {"x": 3.9, "y": 2}, "32.03"),
    ("big-decimal", "return '' + (new BigDecimal('7').intValue() + 1) + new BigDecimal(params.i.toString())",
     {"i": 12}, "812"),
    ("static-fields", "return '' + Integer.MAX_VALUE + ' ' + Long.MIN_VALUE", {},
     "2147483647 -9223372036854775808"),
    ("to-string", "return params.n.toString() + [1].toString() + true.toString()", {"n": 1.5}, "1.5[1]true"),
]


@pytest.mark.parametrize("source, params, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_construct(source: str, params: dict[str, Any], expected: Any) -> None:
    assert run(source, params) == expected


@pytest.mark.parametrize("value, expected", [
    (1e-4, "1.0E-4"), (0.5, "0.5"), (12.0, "12.0"), (0.001, "0.001"), (9.99e-4, "9.99E-4"),
    (9999999.0, "9999999.0"), (1e7, "1.0E7"), (-3.25e-10, "-3.25E-10"), (1e100, "1.0E100"),
    (0.1 + 0.2, "0.30000000000000004"), (-0.0, "-0.0"), (float("inf"), "Infinity"), (123456789012.0, "1.23456789012E11"),
])
def test_double_to_string(value: float, expected: str) -> None:
    assert double_to_string(value) == expected


@pytest.mark.parametrize("value, expected", [
    (0.1, "0.1"), (1e-4, "1.0E-4"), (1.1e7, "1.1E7"), (1 / 3, "0.33333334"), (3.4e38, "3.4E38"), (16777217.0, "1.6777216E7"),
])
def test_float_to_string(value: float, expected: str) -> None:
    assert float_to_string(JFloat.of(value)) == expected


# ------------------------------------------------------------------ errors: compile time

COMPILE_ERRORS = [
    ("unterminated-string", "return 'abc", "line 1, column 8: unterminated string literal"),
    ("bad-escape", 'return "a\\nb"', "line 1, column 8: invalid escape '\\n'"),
    ("missing-semicolon", "def a = 1 def b = 2", "line 1, column 11: expected ';'"),
    ("unclosed-block", "if (true) {\n return 'x'", "expected '}' to close the block opened at line 1, column 11"),
    ("undeclared", "return y", "line 1, column 8: cannot resolve symbol [y]"),
    ("redeclared", "def x = 1; def x = 2", "line 1, column 16: variable [x] is already defined"),
    ("unknown-function", "return nope(1)", "line 1, column 8: unknown function [nope/1]"),
    ("unknown-class", "return new File('/etc/passwd')", "line 1, column 12: class File is not available"),
    ("lambda", "params.v.removeIf(x -> x == null)", "line 1, column 21: lambda"),
    ("method-reference", "params.v.forEach(String::valueOf)", "method reference"),
    ("regex", "return params.s ==~ /a.*/", "line 1, column 21: regex literal"),
    ("regex-find", "return params.s =~ params.p", "regex find"),
    ("try-catch", "try { return 'a' } catch (Exception e) { return 'b' }", "line 1, column 1: try/catch"),
    ("in-loop", "for (x in params.v) { }", "for (x in y) loop"),
    ("unknown-static", "return System.getenv('HOME')", "cannot resolve symbol [System]"),
    ("unknown-static-method", "return Math.random()", "static method [Math.random/0] is not available"),
    ("break-outside-loop", "break", "break outside of a loop"),
    ("int-out-of-range", "return 2147483648", "out of range for int"),
    ("deep-nesting", "return " + "(" * 200 + "1" + ")" * 200, "nested more than 32 levels deep"),
    ("bare-block", "{ return 'x' }", "a block '{' must follow"),
    ("assign-to-call", "params.size() = 1", "is not a variable"),
]


@pytest.mark.parametrize("source, message", [c[1:] for c in COMPILE_ERRORS], ids=[c[0] for c in COMPILE_ERRORS])
def test_compile_error(source: str, message: str) -> None:
    with pytest.raises(ScriptError) as caught:
        run(source)
    assert message in caught.value.reason
    assert caught.value.http_status == 400 and caught.value.error_type == "script_exception"


# ------------------------------------------------------------------ errors: run time

RUNTIME_ERRORS = [
    ("null-field", "return params.a.b", {}, "line 1: NullPointerException: Cannot access field [b]"),
    ("null-method", "return params.a.length()", {}, "NullPointerException"),
    ("index-out-of-bounds", "return params.v[2]", {"v": [1]}, "Index 2 out of bounds for length 1"),
    ("division-by-zero", "int z = 0;\nreturn '' + (1 / z)", {}, "line 2: ArithmeticException: / by zero"),
    ("throw", "throw new IllegalArgumentException('input is empty')", {},
     "IllegalArgumentException: input is empty"),
    ("bad-cast", "int i = params.s", {"s": "x"}, "Cannot cast [String] to [int]"),
    ("non-boolean-condition", "if (params.n) { return 'x' }", {"n": 1}, "Cannot cast [Integer] to [boolean]"),
    ("returns-non-string", "return params.v", {"v": [1]}, "Cannot cast [ArrayList] to [String]"),
    ("unknown-method", "return params.s.exec()", {"s": "x"}, "dynamic method [String, exec/0] not found"),
    ("no-reflection", "return params.getClass()", {}, "dynamic method [HashMap, getClass/0] not found"),
    ("substring-range", "return 'abc'.substring(2, 1)", {}, "StringIndexOutOfBoundsException"),
    ("parse-int", "return '' + Integer.parseInt('x1')", {}, 'NumberFormatException: For input string: "x1"'),
    ("compare-strings", "return '' + ('a' < 'b')", {}, "Cannot apply [<]"),
    ("map-iteration", "for (def x : params.m) {}", {"m": {}}, "Cannot iterate over [HashMap]"),
    ("array-add", "def a = new int[1]; a.add(1)", {}, "dynamic method [array, add/1] not found"),
    ("split-backtracking-regex", "return 'aaaaaaaaaaaaaaaaaaaaaaaaaaaa!'.split('(a+)+$')", {},
     "split with the regular expression [(a+)+$] is not supported"),
]


@pytest.mark.parametrize("source, params, message", [c[1:] for c in RUNTIME_ERRORS],
                         ids=[c[0] for c in RUNTIME_ERRORS])
def test_runtime_error(source: str, params: dict[str, Any], message: str) -> None:
    script = compile_script(source)   # compiles: the failure is the run's
    with pytest.raises(ScriptError) as caught:
        script.run(params)
    assert message in caught.value.reason and caught.value.http_status == 400


# ------------------------------------------------------------------ budgets

BUDGETS = [
    ("endless-loop", "while (true) {}", "more than 1000 steps (max_steps)"),
    ("endless-for", "for (;;) { }", "max_steps"),
    ("endless-recursion", "def f(def x) { return f(x) } return f(1)", "max_call_depth"),
    ("doubling-string", "def s = 'x'; while (true) { s = s + s }", "longer than 4096 characters (max_string_chars)"),
    ("growing-builder", "def b = new StringBuilder(); while (true) { b.append('xxxxxxxxxxxxxxxxxxxxxxxxxx') }",
     "max_string_chars"),
    ("growing-list", "def l = []; while (true) { l.add(new int[100]) }", "max_allocated"),
    ("huge-array", "def a = new int[100000000]", "max_allocated"),
    ("replace-bomb", "def s = 'xxxxxxxxxxxxxxxx'; while (true) { s = s.replace('x', 'xx') }", "max_string_chars"),
]
SMALL = Limits(max_steps=1000, max_string_chars=4096, max_allocated=20_000, max_call_depth=16)


@pytest.mark.parametrize("source, message", [c[1:] for c in BUDGETS], ids=[c[0] for c in BUDGETS])
def test_budget(source: str, message: str) -> None:
    with pytest.raises(ScriptError) as caught:
        run(source, {}, SMALL)
    assert message in caught.value.reason and caught.value.http_status == 400


def test_default_budget_stops_an_endless_loop() -> None:
    with pytest.raises(ScriptError) as caught:
        run("int i = 0; while (true) { i++ }")
    assert "max_steps" in caught.value.reason


def test_a_script_is_compiled_once() -> None:
    source = "return 'cached ' + params.x"
    assert compile_script(source) is compile_script(source)


def test_runs_do_not_share_state() -> None:
    script = compile_script("def l = params.l; l.add(1); return '' + l.size()")
    assert script.run({"l": []}) == "1" and script.run({"l": []}) == "1"


@pytest.mark.parametrize("source, message", [
    ("def a = [1, 2]; for (int i = 0; i < 40; i++) { a = [a, a] } return '' + a", "max_string_chars"),
    ("def a = ['x']; a.add(a); return '' + a", "contains itself"),
    ("def m = [:]; m.put('k', m); return m.toString()", "contains itself"),
    ("def a = ['xxxxxxxxxx']; for (int i = 0; i < 14; i++) { a = [a, a, a] } def b = new StringBuilder(); "
     "b.append(a)", "max_string_chars"),
])
def test_printing_shared_or_cyclic_collections_is_bounded(source: str, message: str) -> None:
    # a list of lists that share lists prints exponentially larger than it is
    with pytest.raises(ScriptError) as caught:
        run(source)
    assert message in caught.value.reason


def test_shared_collections_print_when_small() -> None:
    assert run("def m = ['a': ['b', 'c'], 'd': 1.5]; return '' + m + [m, m]") == (
        "{a=[b, c], d=1.5}[{a=[b, c], d=1.5}, {a=[b, c], d=1.5}]")
