"""Painless HashMap iteration order and UTF-16 Strings, against small references of Java.

``RefHashMap`` walks java.util.HashMap's algorithm (Java 21) step by step: a table of
bucket lists made on the first put, 16 buckets by default, ``(h ^ (h >>> 16)) & (n - 1)``
to pick a bucket, new keys at a bucket's tail, doubling when the size passes three
quarters of the table (each bucket re-dealt in order), removal unlinking, ``clear``
keeping the table, ``HashMap(Map)`` and ``putAll`` sizing the table first. It is written
apart from the interpreter (hash codes from the UTF-16 bytes and ``struct``), so that the
two can disagree. Hash codes a few cases rest on are worked out by hand in comments.

Which Maps are HashMaps: the Maps a script makes (``[:]``, ``new HashMap()``). The Maps
ml-commons gives a script keep insertion order: ``ScriptUtils.executePostProcessFunction``
parses the answer with ``StringUtils.fromJson`` (Jackson ``convertValue(..., Map.class)``:
``LinkedHashMap`` at every level) and ``DefaultPreProcessFunction`` with
``gson.fromJson(..., Map.class)`` (``LinkedTreeMap``, insertion ordered).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mlstream.painless import compile_script

# ------------------------------------------------------------------ the reference


def ref_hash(key: tuple[str, Any]) -> int:
    """hashCode of a typed key, ("String", "a"), ("Integer", 1), ("Long", 5), ("Double",
    1.5), ("Boolean", True), as an unsigned 32-bit number."""
    kind, value = key
    if kind == "String":
        data = value.encode("utf-16-be", "surrogatepass")
        h = 0
        for (unit,) in struct.iter_unpack(">H", data):
            h = (h * 31 + unit) % 2**32
        return h
    if kind == "Integer":
        return value % 2**32
    if kind == "Long":
        bits = value % 2**64
        return (bits ^ (bits >> 32)) % 2**32
    if kind == "Double":
        (bits,) = struct.unpack(">q", struct.pack(">d", value))
        bits %= 2**64
        return (bits ^ (bits >> 32)) % 2**32
    assert kind == "Boolean"
    return 1231 if value else 1237


class RefHashMap:
    def __init__(self) -> None:
        self.table: list[list[list[Any]]] | None = None
        self.threshold = 0
        self.size = 0
        self.overfull = False

    def _index(self, key: Any, n: int) -> int:
        h = ref_hash(key)
        return (h ^ (h >> 16)) & (n - 1)

    def _resize(self) -> None:
        old_cap = len(self.table) if self.table is not None else 0
        if old_cap > 0:
            new_cap = old_cap * 2
            new_thr = self.threshold * 2 if old_cap >= 16 else int(new_cap * 0.75)
        elif self.threshold > 0:
            new_cap, new_thr = self.threshold, int(self.threshold * 0.75)
        else:
            new_cap, new_thr = 16, 12
        table: list[list[list[Any]]] = [[] for _ in range(new_cap)]
        for bucket in self.table or []:
            for entry in bucket:
                table[self._index(entry[0], new_cap)].append(entry)
        self.table, self.threshold = table, new_thr

    def put(self, key: Any, value: Any) -> None:
        if self.table is None:
            self._resize()
        bucket = self.table[self._index(key, len(self.table))]
        for entry in bucket:
            if entry[0] == key:
                entry[1] = value
                return
        bucket.append([key, value])
        self.overfull |= len(bucket) > 8   # a ninth would treeify (or resize early): not modelled
        self.size += 1
        if self.size > self.threshold:
            self._resize()

    def remove(self, key: Any) -> None:
        if self.table is None:
            return
        bucket = self.table[self._index(key, len(self.table))]
        for entry in bucket:
            if entry[0] == key:
                bucket.remove(entry)
                self.size -= 1
                return

    def clear(self) -> None:
        if self.table is not None and self.size > 0:
            self.table = [[] for _ in self.table]
            self.size = 0

    def _presize(self, s: int) -> None:
        if self.table is None:
            t = math.ceil(s / 0.75)
            if t > self.threshold:
                n = 1
                while n < t:
                    n *= 2
                self.threshold = n
        else:
            while s > self.threshold:
                self._resize()

    def put_all(self, other: RefHashMap) -> None:
        if other.size:
            self._presize(other.size)
        for key, value in other.entries():
            self.put(key, value)

    def entries(self) -> list[tuple[Any, Any]]:
        return [(k, v) for bucket in self.table or [] for k, v in bucket]


def literal(key: tuple[str, Any]) -> str:
    kind, value = key
    if kind == "String":
        return "'" + value + "'"
    if kind == "Long":
        return f"{value}L"
    if kind == "Boolean":
        return "true" if value else "false"
    return repr(value)


def printed(key: tuple[str, Any]) -> str:
    kind, value = key
    if kind == "Boolean":
        return "true" if value else "false"
    return str(value)


def ref_text(m: RefHashMap) -> str:
    return "{" + ", ".join(f"{printed(k)}={v}" for k, v in m.entries()) + "}"


def run(source: str, params: dict[str, Any] | None = None) -> Any:
    return compile_script(source).run(params or {})


# ------------------------------------------------------------------ the reference, checked by hand

def test_reference_hashes_worked_by_hand() -> None:
    # "Aa" and "BB": 65*31 + 97 = 2112 = 66*31 + 66, Java's best-known collision
    assert ref_hash(("String", "Aa")) == ref_hash(("String", "BB")) == 2112
    # "banana": b=98 a=97 n=110 -> 98*31^5 + 97*31^4 + 110*31^3 + 97*31^2 + 110*31 + 97 =
    # 2898612069 mod 2^32, the int -1396355227
    assert ref_hash(("String", "banana")) == 2898612069
    # one character past U+FFFF hashes as its two units: U+1F600 is D83D DE00,
    # 0xD83D * 31 + 0xDE00 = 1716067 + 56832 = 1772899
    assert ref_hash(("String", "\U0001F600")) == 1772899
    assert ref_hash(("Long", -1)) == 0          # 0xFFFFFFFF ^ 0xFFFFFFFF
    assert ref_hash(("Double", 1.0)) == 1072693248   # bits 0x3FF00000_00000000


def test_fruit_order_worked_by_hand() -> None:
    # apple  93029210   = 0x058B835A, ^ (h >>> 16) = 0x058B86D1: bucket 1 of 16
    # banana 2898612069 = 0xACC54F65, ^ (h >>> 16) = 0xACC5E3A0: bucket 0
    # cherry 2933454233 = 0xAED8F599, ^ (h >>> 16) = 0xAED85B41: bucket 1, with apple
    # so banana comes first, then apple and cherry in the order they were put
    m = RefHashMap()
    for name in ("banana", "apple", "cherry"):
        m.put(("String", name), 0)
    assert [k[1] for k, _ in m.entries()] == ["banana", "apple", "cherry"]
    assert run("def m = ['banana': 1, 'apple': 2, 'cherry': 3]; return '' + m") == "{banana=1, apple=2, cherry=3}"
    assert run("def m = ['cherry': 3, 'apple': 2, 'banana': 1]; return '' + m") == "{banana=1, cherry=3, apple=2}"


# ------------------------------------------------------------------ scripts, case by case

CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("ints-by-bucket", "def m = [20: 'a', 3: 'b', 17: 'c', 1: 'd']; return '' + m", {}, "{17=c, 1=d, 3=b, 20=a}"),
    ("same-hash-insertion", "def m = [:]; m.BB = 1; m.Aa = 2; return '' + m", {}, "{BB=1, Aa=2}"),
    ("same-hash-reversed", "def m = [:]; m.Aa = 2; m.BB = 1; return '' + m", {}, "{Aa=2, BB=1}"),
    ("re-put-keeps-place", "def m = [17: 1, 1: 2]; m.put(17, 3); return '' + m", {}, "{17=3, 1=2}"),
    ("remove-then-put-goes-last", "def m = [17: 1, 1: 2]; m.remove(17); m.put(17, 3); return '' + m",
     {}, "{1=2, 17=3}"),
    # 13 entries pass 12 (3/4 of 16): 32 buckets; the multiples of 32 stay in bucket 0,
    # the others go to bucket 16, each in the order put
    ("growth", "def m = [:]; for (int i = 12; i >= 0; i--) { m.put(i * 16, i) } return '' + m.keySet()",
     {}, "[192, 160, 128, 96, 64, 32, 0, 176, 144, 112, 80, 48, 16]"),
    ("keyset-values", "def m = new HashMap(); m.put('b', 2); m.put('a', 1); return '' + m.keySet() + m.values()",
     {}, "[a, b][1, 2]"),
    # true 1231 = 0x4CF: bucket 15; false 1237 = 0x4D5: 5; 5L: 5; 1.5 (bits 0x3FF8 0000 0000
    # 0000): 0x3FF80000, spread 0x3FF83FF8: 8
    ("boolean-long-double-keys", "def m = [true: 1, false: 2, 5L: 3, 1.5: 4]; return '' + m", {},
     "{false=2, 5=3, 1.5=4, true=1}"),
    ("nested-printed-in-order", "def m = ['z': ['b': 1, 'a': 2]]; return '' + m", {}, "{z={a=2, b=1}}"),
    ("list-of-maps", "return '' + [['b': 1, 'a': 2]]", {}, "[{a=2, b=1}]"),
    ("linked-hash-map", "def m = new LinkedHashMap(); m.put('b', 1); m.put('a', 2); return '' + m + m.keySet()",
     {}, "{b=1, a=2}[b, a]"),
    ("linked-copy-keeps-source-order", "def m = new LinkedHashMap(['b': 1, 'a': 2]); return '' + m",
     {}, "{a=2, b=1}"),
    # given Maps: Jackson LinkedHashMap / gson LinkedTreeMap, at every level
    ("params-insertion-order", "return '' + params + params.m.keySet()",
     {"m": {"b": 1, "a": 2}}, "{m={b=1, a=2}}[b, a]"),
    ("params-in-list", "return '' + params.data[0]", {"data": [{"b": 1, "a": 2}]}, "{b=1, a=2}"),
    ("params-after-put", "params.m.c = 3; return '' + params.m", {"m": {"b": 1, "a": 2}}, "{b=1, a=2, c=3}"),
    ("copy-of-params-is-a-hash-map", "return '' + new HashMap(params.m)", {"m": {"b": 1, "a": 2}}, "{a=2, b=1}"),
    ("map-made-then-given-map-put", "def m = new HashMap(); m.b = 1; m.a = 2; params.x = m; return '' + params.x",
     {}, "{a=2, b=1}"),
    # a copy of one entry has 2 buckets (tableSizeFor(ceil(1 / 0.75))): 16 and 0 now
    # share bucket 0 in insertion order, where a 16-bucket map also would; 1 and 3:
    # a 2-bucket table puts 3 with 1, then grows to 4 at the 2nd entry
    ("copy-small-table", "def m = new HashMap([3: 'a']); m.put(1, 'b'); m.put(2, 'c'); return '' + m",
     {}, "{1=b, 2=c, 3=a}"),
    ("put-all-sizes-fresh-map", "def m = [:]; m.putAll([3: 'a']); m.put(1, 'b'); return '' + m", {}, "{1=b, 3=a}"),
    # the table keeps 32 buckets after removals: 16 and 32 in buckets 16 and 0
    ("table-stays-large", ("def m = [:]; for (int i = 0; i < 13; i++) { m.put(100 + i, i) } "
     "for (int i = 0; i < 13; i++) { m.remove(100 + i) } m.put(16, 'a'); m.put(32, 'b'); return '' + m"),
     {}, "{32=b, 16=a}"),
    ("clear-keeps-table", ("def m = [:]; for (int i = 0; i < 13; i++) { m.put(100 + i, i) } m.clear(); "
     "m.put(16, 'a'); m.put(32, 'b'); return '' + m"), {}, "{32=b, 16=a}"),
    ("fresh-table-16", "def m = [:]; m.put(16, 'a'); m.put(32, 'b'); return '' + m", {}, "{16=a, 32=b}"),
]


@pytest.mark.parametrize(("source", "params", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_map_order(source: str, params: dict[str, Any], expected: str) -> None:
    assert run(source, params) == expected


def test_growth_case_against_reference() -> None:
    m = RefHashMap()
    for i in range(12, -1, -1):
        m.put(("Integer", i * 16), i)
    assert "[" + ", ".join(str(k[1]) for k, _ in m.entries()) + "]" == \
        "[192, 160, 128, 96, 64, 32, 0, 176, 144, 112, 80, 48, 16]"


# ------------------------------------------------------------------ property: any sequence of Map operations

KEYS = st.one_of(
    st.tuples(st.just("String"), st.text(alphabet="abAB\u00e9\U0001F600", min_size=1, max_size=3)),
    # not 0 and 1: a Python dict holds 1, 1.0 and true as one key (Java: three), a known gap
    st.tuples(st.just("Integer"), st.integers(2, 70)),
    st.tuples(st.just("Long"), st.integers(10**10, 10**10 + 40)),
    st.tuples(st.just("Double"), st.sampled_from([0.5, 2.5, -1.5, 1e-3, 123.25])),
    st.tuples(st.just("Boolean"), st.booleans()),
)
OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS),
    st.tuples(st.just("remove"), KEYS),
    st.tuples(st.just("clear"), st.none()),
    st.tuples(st.just("copy"), st.none()),
    st.tuples(st.just("putAll"), st.lists(KEYS, max_size=20)),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_map_operations_match_reference(ops: list[tuple[str, Any]]) -> None:
    ref = RefHashMap()
    lines = ["def m = [:];"]
    for number, (op, arg) in enumerate(ops):
        if op == "put":
            ref.put(arg, number)
            lines.append(f"m.put({literal(arg)}, {number});")
        elif op == "remove":
            ref.remove(arg)
            lines.append(f"m.remove({literal(arg)});")
        elif op == "clear":
            ref.clear()
            lines.append("m.clear();")
        elif op == "copy":
            copy = RefHashMap()
            copy.put_all(ref)   # HashMap(Map) is putMapEntries on a new map, as putAll
            copy.overfull |= ref.overfull
            ref = copy
            lines.append("m = new HashMap(m);")
        else:
            other = RefHashMap()
            for key in arg:
                other.put(key, number)
            ref.put_all(other)
            lines.append(f"def o{number} = [:]; " + " ".join(f"o{number}.put({literal(k)}, {number});" for k in arg)
                         + f" m.putAll(o{number});")
    lines.append("return '' + m + m.keySet().size();")
    assume(not ref.overfull)
    assert run("\n".join(lines)) == ref_text(ref) + str(ref.size)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abc\u00e9", min_size=1, max_size=3), unique=True, max_size=20))
def test_given_maps_keep_insertion_order(keys: list[str]) -> None:
    given = {key: n for n, key in enumerate(keys)}
    expected = "{" + ", ".join(f"{k}={v}" for k, v in given.items()) + "}"
    assert run("return '' + params.m + params.l[0]", {"m": given, "l": [dict(given)]}) == expected + expected


def test_params_as_a_hash_map() -> None:
    # RemoteInferencePreProcessFunction's inputParams is a java.util.HashMap; the Maps in it
    # (gson's) keep insertion order. A one-letter key hashes to its code: e 101, a 97,
    # d 100; in 16 buckets 5, 1, 4; in 4 buckets (putAll of 3: tableSizeFor(ceil(3 / 0.75)))
    # 1, 1, 0, e before a as put
    params = {"e": 1, "a": {"y": 1, "x": 2}, "d": 3}
    script = compile_script("return '' + params")
    assert script.run(params) == "{e=1, a={y=1, x=2}, d=3}"
    assert script.run(params, params_table=16) == "{a={y=1, x=2}, d=3, e=1}"
    assert script.run(params, params_table=4) == "{d=3, e=1, a={y=1, x=2}}"


# ------------------------------------------------------------------ UTF-16 Strings

def units(text: str) -> list[int]:
    data = text.encode("utf-16-be", "surrogatepass")
    return [unit for (unit,) in struct.iter_unpack(">H", data)]


def from_ref_units(values: list[int]) -> str:
    return b"".join(struct.pack(">H", v) for v in values).decode("utf-16-be", "surrogatepass")


EMOJI = "a\U0001F600b\u00e9\U0001F680c"   # units: a D83D DE00 b e9 D83D DE80 c (8)

UTF16_CASES: list[tuple[str, str, str]] = [
    ("length", "return '' + params.s.length()", "8"),
    ("charAt-high-half", "return params.s.charAt(1)", "\ud83d"),
    ("charAt-after-pair", "return params.s.charAt(3)", "b"),
    ("substring-whole-pair", "return params.s.substring(1, 3)", "\U0001F600"),
    ("substring-splits-pair", "return params.s.substring(2)", "\ude00b\u00e9\U0001F680c"),
    ("indexOf", "return '' + params.s.indexOf('b') + ',' + params.s.indexOf('c', 7) + ',' + params.s.indexOf('\U0001F680')",
     "3,7,5"),
    ("lastIndexOf", "return '' + params.s.lastIndexOf('') + ',' + params.s.lastIndexOf('\u00e9')", "8,4"),
    ("builder-length", ("def sb = new StringBuilder(); sb.append(params.s); sb.append('\U0001F600'); "
     "return '' + sb.length()"), "10"),
    ("builder-charAt", "def sb = new StringBuilder(params.s); return sb.charAt(6)", "\ude80"),
    ("builder-insert-by-units", "def sb = new StringBuilder(params.s); sb.insert(3, 'X'); return sb.toString()",
     "a\U0001F600Xb\u00e9\U0001F680c"),
    ("builder-setLength-splits", ("def sb = new StringBuilder(params.s); sb.setLength(2); "
     "return sb.toString() + sb.length()"), "a\ud83d2"),
    ("builder-deleteCharAt", "def sb = new StringBuilder(params.s); sb.deleteCharAt(2); return sb.toString()",
     "a\ud83db\u00e9\U0001F680c"),
    ("builder-reverse-keeps-pairs", "def sb = new StringBuilder(params.s); return sb.reverse().toString()",
     "c\U0001F680\u00e9b\U0001F600a"),
    ("hashCode", "return '' + '\U0001F600'.hashCode()", "1772899"),
    # Java compares units: U+FFFF sorts after the high surrogate D83D
    ("compareTo-by-units", "return '' + '\uffff'.compareTo('\U0001F600')", str(0xFFFF - 0xD83D)),
    ("split-empty-by-units", "return '' + '\U0001F600'.split('').length", "2"),
    ("builder-edits-after-pairs", ("def sb = new StringBuilder(params.s); sb.deleteCharAt(3); sb.deleteCharAt(3); "
     "return sb.toString() + sb.length()"), "a\U0001F600\U0001F680c6"),
    # deleting the unit between two halves makes them one character again
    ("builder-halves-meet", ("def sb = new StringBuilder(params.s.substring(0, 2)); sb.append('x'); "
     "sb.append(params.s.substring(2, 3)); sb.deleteCharAt(2); return sb.toString() + sb.length()"),
     "a\U0001F6003"),
    # the result of a script that joined two halves with + holds the character they make
    ("halves-joined-result", "return params.s.substring(0, 2) + params.s.substring(2, 4)", "a\U0001F600b"),
]


@pytest.mark.parametrize(("source", "expected"), [c[1:] for c in UTF16_CASES], ids=[c[0] for c in UTF16_CASES])
def test_utf16(source: str, expected: str) -> None:
    assert run(source, {"s": EMOJI}) == expected


def test_utf16_cases_against_reference() -> None:
    u = units(EMOJI)
    assert len(u) == 8
    assert from_ref_units(u[2:]) == "\ude00b\u00e9\U0001F680c"
    assert from_ref_units(u[:2]) == "a\ud83d"
    assert from_ref_units(u[:2] + u[3:]) == "a\ud83db\u00e9\U0001F680c"


TEXT = st.text(alphabet="ab\u00e9\U0001F600\U00010000", max_size=8)


@settings(max_examples=150, deadline=None)
@given(TEXT, st.integers(0, 16), st.integers(0, 16), TEXT)
def test_string_methods_match_units(text: str, i: int, j: int, needle: str) -> None:
    u = units(text)
    begin, end = min(i, j), max(i, j)
    params = {"s": text, "n": needle, "i": i, "begin": begin, "end": end}
    n = units(needle)

    def find(start: int) -> int:
        return next((k for k in range(max(start, 0), len(u) - len(n) + 1) if u[k:k + len(n)] == n), -1)

    def rfind() -> int:
        return next((k for k in range(len(u) - len(n), -1, -1) if u[k:k + len(n)] == n), -1)

    assert run("return '' + params.s.length()", params) == str(len(u))
    assert run("return '' + params.s.indexOf(params.n)", params) == str(find(0))
    assert run("return '' + params.s.indexOf(params.n, params.i)", params) == str(find(i))
    assert run("return '' + params.s.lastIndexOf(params.n)", params) == str(rfind())
    if end <= len(u):
        assert run("return params.s.substring(params.begin, params.end)", params) == from_ref_units(u[begin:end])
    if i < len(u):
        assert run("return params.s.charAt(params.i)", params) == from_ref_units(u[i:i + 1])
        expected = from_ref_units(u[:i] + u[i + 1:])
        assert run("def sb = new StringBuilder(params.s); sb.deleteCharAt(params.i); return sb.toString()",
                   params) == expected
        assert run("def sb = new StringBuilder(params.s); sb.deleteCharAt(params.i); return '' + sb.length()",
                   params) == str(len(u) - 1)
    h = 0
    for unit in u:
        h = (h * 31 + unit) % 2**32
    assert run("return '' + params.s.hashCode()", params) == str(h - 2**32 if h >= 2**31 else h)
