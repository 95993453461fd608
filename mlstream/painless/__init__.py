"""A sandboxed subset of Painless: enough to run the pre- and post-process scripts that
ml-commons' published connector blueprints and tutorials carry.

Pure and I/O-free. A script's way through the modules:

    source -> lexer -> parser (syntax: frozen nodes) -> checker (CheckedProgram: names resolved)
                                                          |-> runtime: closures, the reference
                                                          '-> pysource: Python source, faster
                                                              (scripts with loops or functions)

Both backends call ``semantics`` for the operations they share (the translated code through
``translated``'s namespace), the whitelist (``library``, its methods in ``strings``,
``containers`` and ``numeric``, their argument checks in ``arguments``), ``budget`` for
what a run may spend, and ``values`` and ``operators`` for Java's values and operators.
A script reaches nothing but the values it is given: there are no imports, no classes
beyond the whitelist and no reflection.

    script = compile_script(source)          # ScriptError (400) naming line and column
    text = script.run({"text_docs": [...]})  # ScriptError on a failure or a spent budget
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from ..errors import ScriptError
from .budget import MAX_SOURCE_CHARS, Budget, Limits
from .checker import check
from .library import presized_table
from .operators import Fault
from .parser import parse
from .pysource import repeats, translate_checked
from .runtime import CompiledScript, compile_checked, compile_program
from .values import LazyText, double_to_string, from_units, hash_map_order, table_size

# Besides compiling and running a script: what a caller needs to give a script Java's
# view of its input and to read its output (mlstream.processing: a Double's text, a
# HashMap's order and table size, a String not yet joined), and a script compiled to
# closures only, without the translation (the benchmark compares the two).
__all__ = [
    "BUILTINS", "DEFAULT_LIMITS", "LazyText", "Limits", "Script", "ScriptError", "compile_program",
    "compile_script", "double_to_string", "hash_map_order", "parse", "presized_table", "table_size",
]

DEFAULT_LIMITS = Limits()
_CACHE_SIZE = 256


def _escape(budget: Budget, value: Any) -> str:
    """ml-commons' ``escape`` helper (``StringUtils.DEFAULT_ESCAPE_FUNCTION``), which it
    prepends to a script that calls ``escape`` without declaring it. Each step below is one
    of its replacements, in its order; like it, a real tab is left alone and only the
    two characters backslash-t are rewritten."""
    if value is None:
        raise Fault("NullPointerException", "escape(null): Cannot invoke [contains] on a null value")
    if type(value) is not str:
        raise Fault("IllegalArgumentException", f"escape needs a String, not a {type(value).__name__}")
    text = value
    for old, new in (("\\", "\\\\"), ('"', '\\"'), ("\r", "\\r"), ("\\t", "\\\\\\t"), ("\n", "\\n"),
                     ("\b", "\\b"), ("\f", "\\f")):
        if old in text:
            text = budget.string(text.replace(old, new))
    return text


BUILTINS = {"escape": (1, _escape)}


class Script:
    """A compiled script; immutable, safe to run from many threads at once."""

    __slots__ = ("_compiled", "source")

    def __init__(self, source: str, compiled: CompiledScript) -> None:
        self.source = source
        self._compiled = compiled

    def run(self, params: dict[str, Any], limits: Limits = DEFAULT_LIMITS, *, lazy: bool = False,
            params_table: int = 0) -> Any:
        """The script's value. With ``lazy``, a String it returns may come as a
        ``LazyText``: its parts, the Lists of doubles printed into it not yet printed.

        The Maps in ``params`` iterate in insertion order (ml-commons gives Jackson's
        LinkedHashMaps and gson's LinkedTreeMaps), and so does ``params`` unless
        ``params_table`` says it is a java.util.HashMap whose table starts with that many
        buckets (``RemoteInferencePreProcessFunction``: 16 when it puts each parameter,
        ``tableSizeFor(ceil(n / 0.75))`` when it ``putAll``s n), its keys in the dict's
        order where they share a bucket."""
        result = self._compiled.run(params, limits, lazy=lazy, params_table=params_table)
        # halves of a character past U+FFFF that the script joined with + are one again,
        # as they are in a Java String; a lone half stays
        return from_units(result) if type(result) is str else result


_cache: OrderedDict[str, Script] = OrderedDict()
_cache_lock = threading.Lock()   # guards _cache (a compile runs outside it)


def compile_script(source: str) -> Script:
    """The compiled script for ``source``; the last few hundred are kept compiled."""
    with _cache_lock:
        script = _cache.get(source)
        if script is not None:
            _cache.move_to_end(source)
            return script
    if len(source) > MAX_SOURCE_CHARS:
        raise ScriptError(f"a Painless script may be at most {MAX_SOURCE_CHARS} characters long")
    try:
        program = parse(source)
        checked = check(program, BUILTINS)   # ScriptError names the place
        translated = translate_checked(checked) if repeats(program) else None
        script = Script(source, compile_checked(checked).translated_to(translated))
    except RecursionError:
        raise ScriptError("Painless syntax error: the script is nested too deeply") from None
    with _cache_lock:
        _cache[source] = script
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return script
