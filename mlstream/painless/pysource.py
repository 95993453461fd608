"""Translates a checked program (``checker.CheckedProgram``) into Python source: one
Python function per Painless function, compiled by CPython, that runs exactly as
``runtime``'s closures do.

Pure. The checker has resolved every name (a variable is the local named for its slot);
both backends call ``semantics`` for what they do not inline. The closures remain
the reference: what a translated function computes, charges, raises and reports as the
line is what the closures do (the tests run both on the same scripts and inputs). One
difference is wanted: a closure takes several Python frames a Painless call, so deep
recursion that stops the closures with "nested too deeply" may run to its end here.

Why: a closure interpreter pays one Python call per node. Translated, a variable is a
Python local, ``break``/``continue``/``return`` are Python's own, and the common cases
of ``<``, ``-``, ``[]``, ``.field`` and method calls run inline: the loops scripts run
over every number of an answer take a half to a quarter of the time. Only scripts that
can repeat a statement are translated (``repeats``).

Safety: nothing a script says becomes Python source but values. Names are ours (``v3``
a variable, ``t5`` a temporary, ``u0`` a function, ``C2`` a constant); a String literal
is written with ``repr``; any other value is a constant the namespace holds. The
namespace's builtins are only ``type``, ``len`` and the types it tests for. When CPython cannot
compile the result (nesting past its parser's limits), ``translate_checked`` returns None and
the closures run the script.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import library
from .budget import Budget
from .checker import Builtins, CheckedFunction, CheckedProgram, check
from .operators import Fault
from .semantics import INT_LIMIT, default_value
from .syntax import (
    Assign,
    Binary,
    Block,
    Call,
    Cast,
    Conditional,
    Declare,
    Elvis,
    Expr,
    ExprStatement,
    Field,
    For,
    ForEach,
    If,
    Increment,
    Index,
    InstanceOf,
    Jump,
    ListInit,
    Literal,
    LocalCall,
    MapInit,
    NewArray,
    NewObject,
    Program,
    Return,
    Statement,
    StaticCall,
    StaticField,
    Throw,
    TypeName,
    Unary,
    Variable,
    While,
    concat_operands,
)
from .translated import NAMESPACE, PLAIN_NUMBERS

__all__ = ["repeats", "translate", "translate_checked"]

_MAX_NESTING = 40   # deeper expressions or blocks stay with the closures (CPython's parser limits)
_COMPARISONS = frozenset({"<", "<=", ">", ">="})
_PRIMITIVES: dict[str, type] = {"int": int, "double": float, "boolean": bool}
# name -> (the value, when the test holds): what the whitelist's Number methods give then
_NUMBER_CONVERSIONS = {
    "intValue": ("{0}", f"type({{0}}) is int and {-INT_LIMIT} <= {{0}} < {INT_LIMIT}"),
    "doubleValue": ("{0}", "type({0}) is float"),
    "floatValue": ("float32({0})", "type({0}) is float"),
}


def translate(program: Program, builtins: Builtins) -> Callable[[Budget, dict[str, Any]], Any] | None:
    """``program`` checked (``checker.check``: a ``ScriptError`` names the place) and
    translated: see ``translate_checked``."""
    if _nesting(program) > _MAX_NESTING:   # too deep to translate: not worth checking
        return None
    return translate_checked(check(program, builtins))


def translate_checked(checked: CheckedProgram) -> Callable[[Budget, dict[str, Any]], Any] | None:
    """The script's body as a Python function ``(budget, params) -> value`` (a String
    result may be a ``LazyText``), or None when CPython cannot compile it."""
    if _nesting(checked.program) > _MAX_NESTING:
        return None
    translator = _Translator(checked)
    source = translator.source()
    try:
        code = compile(source, "<painless>", "exec")
    except (SyntaxError, RecursionError, MemoryError, ValueError, OverflowError, SystemError):
        return None
    namespace = translator.namespace
    exec(code, namespace)  # noqa: S102 - our own source (see above): defines the functions, runs nothing
    return namespace["main"]


def repeats(program: Program) -> bool:
    """Whether ``program`` can run a statement more than once (a loop or a function of
    its own). A script without runs each statement once at most: compiling it to Python
    (about a millisecond) would cost more than it saves, so the closures run it."""
    if program.functions:
        return True
    stack: list[Any] = list(program.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (For, While, ForEach)):
            return True
        stack.extend(_children(node))
    return False


def _nesting(program: Program) -> int:
    """The deepest nesting of statements and expressions in ``program`` (stops counting
    past the limit)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(program, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > _MAX_NESTING:
            break
        stack.extend((child, depth + 1) for child in _children(node))
    return deepest


def _children(node: Any) -> list[Any]:
    found: list[Any] = []
    pending = [getattr(node, name) for name in node.__slots__]
    while pending:
        value = pending.pop()
        if isinstance(value, tuple):
            pending.extend(value)
        elif hasattr(value, "__slots__") and not isinstance(value, TypeName):
            found.append(value)
    return found


def _assigns(node: Any) -> bool:
    """Whether evaluating ``node`` may store into a variable."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, (Assign, Increment)):
            return True
        stack.extend(_children(item))
    return False


# ---------------------------------------------------------------- the translator

class _Function:
    """The function being written: its lines, indentation and temporaries."""

    def __init__(self, returns: TypeName, top_level: bool) -> None:
        self.lines: list[str] = []
        self.depth = 1
        self.temps = 0
        self.returns = returns
        self.top_level = top_level

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def temp(self) -> str:
        self.temps += 1
        return f"t{self.temps}"


class _Translator:
    def __init__(self, checked: CheckedProgram) -> None:
        self.checked = checked
        self.namespace: dict[str, Any] = dict(NAMESPACE)
        self.constants = 0
        self.out = _Function(TypeName("def"), False)

    def source(self) -> str:
        chunks = [self.function(function) for function in self.checked.functions]
        chunks.append(self.main())
        return "\n\n".join(chunks) + "\n"

    # ------------------------------------------------------------ names and values

    def constant(self, value: Any) -> str:
        name = f"C{self.constants}"
        self.constants += 1
        self.namespace[name] = value
        return name

    def literal(self, value: Any) -> str:
        kind = type(value)
        if value is None or kind is bool:
            return repr(value)
        if kind is str or (kind is int and -INT_LIMIT <= value < INT_LIMIT):
            return f"({value!r})" if kind is int and value < 0 else repr(value)
        return self.constant(value)

    def variable(self, node: Variable | ForEach) -> str:
        return f"v{self.checked.slot(node).index}"

    def known_type(self, node: Expr) -> type | None:
        """The Python type ``node``'s value always has, when the translation knows it:
        a constant's, or a variable declared ``int``, ``double`` or ``boolean`` (stored
        through ``coerce``/``cast``, an ``int`` is always within 32 bits)."""
        if isinstance(node, Literal):
            kind = type(node.value)
            return kind if kind in (str, float, bool) or (kind is int and -INT_LIMIT <= node.value < INT_LIMIT) else None
        if isinstance(node, Variable):
            slot = self.checked.slot(node)
            if not slot.type.dims:
                return _PRIMITIVES.get(slot.type.name)
        return None

    # ------------------------------------------------------------ functions

    def function(self, function: CheckedFunction) -> str:
        node = function.node
        self.out = out = _Function(node.returns, False)
        parameters = [(f"v{slot.index}", slot.type) for slot in function.parameters]
        out.emit("MAX = B.limits.max_steps")
        out.emit("S = B.steps + 1")   # the call is a step
        out.emit("if S > MAX: steps_spent(B)")
        out.emit("if B.depth >= B.limits.max_call_depth: too_deep(B)")
        for local, ptype in parameters:
            if ptype.name != "def" or ptype.dims:
                out.emit(f"{local} = coerce({local}, {ptype.name!r}, {ptype.dims}, 'as an argument')")
        out.emit("B.depth += 1")
        self.guarded(node.body.statements, implicit_return=False)
        # after the body, a failure is the caller's, on the caller's line
        out.emit("B.depth -= 1; B.steps = S")
        returns = node.returns
        if returns.name != "void" and returns.name != "def" and not returns.name[0].isupper():
            out.emit("no_return()")
        out.emit("return None")
        head = f"def u{function.position}(B{''.join(', ' + local for local, _ in parameters)}):"
        return "\n".join([head, *out.lines])

    def main(self) -> str:
        params = f"v{self.checked.params_slot}"
        self.out = out = _Function(TypeName("String"), True)
        out.emit("MAX = B.limits.max_steps")
        out.emit("S = B.steps")
        self.guarded(self.checked.program.body, implicit_return=True)
        out.emit("return None")
        return "\n".join([f"def main(B, {params}):", *out.lines])

    def guarded(self, statements: tuple[Statement, ...], *, implicit_return: bool) -> None:
        """The body, run with the line of the statement running in a local (``ln``),
        given to a failure on its way out (the innermost function's line is kept)."""
        out = self.out
        out.emit("ln = 0")
        out.emit("try:")
        out.depth += 1
        self.statements(statements, implicit_return=implicit_return)
        out.depth -= 1
        out.emit("except BaseException as failure:")
        out.emit("    if not hasattr(failure, 'painless_line'): failure.painless_line = ln")
        out.emit("    raise")

    # ------------------------------------------------------------ statements

    def statements(self, statements: tuple[Statement, ...], *, implicit_return: bool) -> None:
        start = len(self.out.lines)
        for position, statement in enumerate(statements):
            last = implicit_return and position == len(statements) - 1
            self.step(statement.line)
            if last and isinstance(statement, ExprStatement):
                # Painless returns the value of a script's last expression statement.
                self.return_(statement.expr)
            else:
                self.statement(statement)
        if len(self.out.lines) == start:
            self.out.emit("pass")

    def step(self, line: int) -> None:
        self.out.emit(f"ln = {line}; S += 1")
        self.out.emit("if S > MAX: steps_spent(B)")

    def tick(self) -> None:
        self.out.emit("S += 1")
        self.out.emit("if S > MAX: steps_spent(B)")

    def block(self, block: Block) -> None:
        self.out.depth += 1
        self.statements(block.statements, implicit_return=False)
        self.out.depth -= 1

    def statement(self, node: Statement) -> None:
        out = self.out
        if isinstance(node, ExprStatement):
            out.emit(self.effect(node.expr))
        elif isinstance(node, Declare):
            for (_, init, _, _), slot in zip(node.names, self.checked.declared(node)):
                value = self.stored(self.expr(init), node.type, init) if init is not None else \
                    self.literal(default_value(node.type))
                out.emit(f"v{slot.index} = {value}")
        elif isinstance(node, If):
            out.emit(f"if {self.condition(node.condition, 'an if condition')}:")
            self.block(node.then)
            if node.otherwise is not None:
                out.emit("else:")
                self.block(node.otherwise)
        elif isinstance(node, While):
            self.loop(None, node.condition, None, node.body, node.do_first, "a while condition")
        elif isinstance(node, For):
            self.loop(node.init, node.condition, node.update, node.body, False, "a for condition")
        elif isinstance(node, ForEach):
            items = self.expr(node.iterable)
            local = self.variable(node)
            out.emit(f"for {local} in iterable({items}):")
            out.depth += 1
            self.tick()
            if node.type.name != "def" or node.type.dims:
                out.emit(f"{local} = {self.stored(local, node.type)}")
            out.depth -= 1
            self.block(node.body)
        elif isinstance(node, Return):
            if node.value is None:
                self.leave("None")
            else:
                self.return_(node.value)
        elif isinstance(node, Throw):
            out.emit(f"throw({self.expr(node.value)})")
        elif isinstance(node, Jump):
            out.emit(node.kind)
        else:  # pragma: no cover - the parser makes no other statements
            raise AssertionError(node)

    def loop(self, init: Statement | None, condition: Expr | None, update: Expr | None, body: Block,
             do_first: bool, where: str) -> None:
        """``for``, ``while`` and ``do``: the update runs after the body and after a
        ``continue``; a do-loop's first turn skips the condition."""
        out = self.out
        if init is not None:
            self.statement(init)
        test = self.condition(condition, where) if condition is not None else None
        late_update = update is not None and _continues(body)
        flag = out.temp() if do_first or late_update else None
        if flag is not None:
            out.emit(f"{flag} = False")
        out.emit("while True:")
        out.depth += 1
        if late_update:
            out.emit(f"if {flag}: {self.effect(update)}")
            out.emit(f"else: {flag} = True")
            if test is not None:
                out.emit(f"if not {test}: break")
        elif do_first:
            if test is not None:
                out.emit(f"if {flag} and not {test}: break")
            out.emit(f"{flag} = True")
        elif test is not None:
            out.emit(f"if not {test}: break")
        self.tick()
        out.depth -= 1
        self.block(body)
        if update is not None and not late_update:
            out.depth += 1
            out.emit(self.effect(update))
            out.depth -= 1

    def return_(self, node: Expr) -> None:
        out = self.out
        if out.top_level:
            lazy = self.lazy_text(node)
            if lazy is not None:
                self.leave(f"string_result({lazy})")
                return
        value = self.expr(node)
        rtype = out.returns
        if rtype.name != "def" or rtype.dims:
            value = f"coerce({value}, {rtype.name!r}, {rtype.dims}, 'as the return value')"
        self.leave(value)

    def leave(self, value: str) -> None:
        out = self.out
        if out.top_level:
            out.emit(f"return {value}")
            return
        result = out.temp()
        out.emit(f"{result} = {value}")
        out.emit("B.depth -= 1; B.steps = S")
        out.emit(f"return {result}")

    def lazy_text(self, node: Expr) -> str | None:
        if isinstance(node, Binary) and node.op == "+":
            return f"lazy_result({self.chain(node)})"
        if isinstance(node, Call) and node.name == "toString" and not node.args:
            return f"builder_text(B, {self.expr(node.target)}, {node.null_safe})"
        return None

    def chain(self, node: Binary) -> str:
        operands = concat_operands(node)
        code = f"Concat(B, {self.expr(operands[0])})"
        for operand in operands[1:]:
            code = f"{code}.add({self.expr(operand)})"
        return f"{code}.result()"

    # ------------------------------------------------------------ expressions

    def stored(self, value: str, type_: TypeName, node: Expr | None = None) -> str:
        if type_.name == "def" and not type_.dims:
            return value
        if isinstance(node, Literal) and type(node.value) in (int, str, bool, float) and not type_.dims:
            try:   # a constant stored into a variable: coerced once, here
                return self.literal(library.coerce(node.value, type_.name, 0))
            except Fault:
                pass   # the run fails there, as the closures do
        return f"coerce({value}, {type_.name!r}, {type_.dims})"

    def narrowed(self, value: str, type_: TypeName) -> str:
        if type_.name == "def" and not type_.dims:
            return value
        if not type_.dims and type_.name in ("int", "long", "short", "byte", "float", "double", "char"):
            return f"cast({value}, {type_.name!r}, 0)"
        return f"coerce({value}, {type_.name!r}, {type_.dims})"

    def condition(self, node: Expr, where: str) -> str:
        if _is_boolean(node):
            return self.expr(node)
        t = self.out.temp()
        return f"({t} if ({t} := {self.expr(node)}) is True or {t} is False else truthy({t}, {where!r}))"

    def effect(self, node: Expr) -> str:
        """``node`` as a statement: its value is dropped."""
        if isinstance(node, Assign) and isinstance(node.target, Variable):
            slot = self.checked.slot(node.target)
            local, op = f"v{slot.index}", node.op[:-1]
            if not op:
                return f"{local} = {self.stored(self.expr(node.value), slot.type, node.value)}"
            return f"{local} = {self.narrowed(f'compound(B, {op!r}, {local}, {self.expr(node.value)})', slot.type)}"
        if isinstance(node, Increment) and isinstance(node.target, Variable):
            return f"{self.variable(node.target)} = {self.increment(node, node.target)}"
        return self.expr(node)

    def increment(self, node: Increment, target: Variable) -> str:
        """The new value of ``target`` after ``++``/``--``."""
        slot = self.checked.slot(target)
        local, delta = f"v{slot.index}", node.delta
        general = self.narrowed(f"compound(B, '+', {local}, {delta})", slot.type)
        if slot.type.dims or slot.type.name not in ("int", "def"):
            return general
        # i++ on an int, the loop counter: what the general path makes of it, in one step
        return (f"({local} + {delta} if type({local}) is int and {-INT_LIMIT} <= {local} + {delta} < {INT_LIMIT} "
                f"and {-INT_LIMIT} <= {local} else {general})")

    def expr(self, node: Expr) -> str:
        return getattr(self, "e_" + type(node).__name__)(node)

    def sequence(self, nodes: list[Expr] | tuple[Expr, ...], body: Callable[[list[str]], str]) -> str:
        """``body`` over the values of ``nodes``, each evaluated once, left to right. A
        constant, or a variable no later operand assigns, is read where ``body`` uses it;
        any other value is first stored in a temporary."""
        names, stores = [], []
        assigned_later, later = [], False   # whether an operand after each one assigns
        for node in reversed(nodes):
            assigned_later.append(later)
            later = later or _assigns(node)
        assigned_later.reverse()
        for node, assigns_later in zip(nodes, assigned_later):
            code = self.expr(node)
            if isinstance(node, Literal) or (isinstance(node, Variable) and not assigns_later):
                names.append(code)
            else:
                t = self.out.temp()
                stores.append(f"({t} := {code})")
                names.append(t)
        if not stores:
            return body(names)
        return f"(({', '.join(stores)},) and {body(names)})"

    def e_Literal(self, node: Literal) -> str:
        return self.literal(node.value)

    def e_Variable(self, node: Variable) -> str:
        return self.variable(node)

    def e_ListInit(self, node: ListInit) -> str:
        items = ", ".join(self.expr(item) for item in node.items)
        return f"(charge(B, {len(node.items)}), [{items}])[1]"

    def e_MapInit(self, node: MapInit) -> str:
        entries = ", ".join(f"map_key({self.expr(k)}): {self.expr(v)}" for k, v in node.entries)
        return f"(charge(B, {len(node.entries)}), {{{entries}}})[1]"

    def e_NewObject(self, node: NewObject) -> str:
        return f"construct(B, {node.type!r}, [{', '.join(self.expr(arg) for arg in node.args)}])"

    def e_NewArray(self, node: NewArray) -> str:
        element, dims = node.type.name, node.type.dims
        if node.items is not None:
            inner = TypeName(element, dims - 1)
            items = ", ".join(self.stored(self.expr(item), inner) for item in node.items)
            return (f"(charge(B, {len(node.items)}), "
                    f"JArray([{items}], {element + '[]' * (dims - 1)!r}))[1]")
        sizes = ", ".join(self.expr(size) for size in node.sizes)
        return f"new_array(B, {element!r}, {dims}, [{sizes}])"

    def e_Field(self, node: Field) -> str:
        target = self.expr(node.target)
        if node.null_safe:
            return f"field_null_safe({target}, {node.name!r})"
        t = self.out.temp()
        return f"({t}.get({node.name!r}) if type({t} := {target}) is dict else get_field({t}, {node.name!r}))"

    def e_StaticField(self, node: StaticField) -> str:
        return self.literal(library.static_field(node.type, node.name))

    def e_Index(self, node: Index) -> str:
        def get(names: list[str], first: str | None = None) -> str:
            c, i = names
            checks = ("" if self.known_type(node.index) is int else f"type({i}) is int and ") + f"0 <= {i} < len({c})"
            return f"({c}[{i}] if type({first or c}) is list and {checks} else index_get({c}, {i}))"
        if isinstance(node.index, (Literal, Variable)) and not isinstance(node.target, (Literal, Variable)):
            # the container first, then the index, read where used (Java's order too)
            t = self.out.temp()
            return get([t, self.expr(node.index)], f"{t} := {self.expr(node.target)}")
        return self.sequence([node.target, node.index], get)

    def e_Call(self, node: Call) -> str:
        target, args = node.target, node.args
        hoisted = not (isinstance(target, Literal) or (isinstance(target, Variable) and not any(map(_assigns, args))))
        receiver = self.out.temp() if hoisted else self.expr(target)   # else read where it is used
        if node.name == "append" and len(args) == 1:
            arg = args[0]
            if isinstance(arg, Binary) and arg.op == "+":
                call = f"append_concat(B, {receiver}, {self.chain(arg)})"
            elif isinstance(arg, Literal) and type(arg.value) is str:
                call = (f"(append_text(B, {receiver}, {self.expr(arg)}) if type({receiver}) is JStringBuilder "
                        f"else append_value(B, {receiver}, {self.expr(arg)}))")
            else:
                call = f"append_value(B, {receiver}, {self.expr(arg)})"
        elif isinstance(target, Literal) and target.value is not None:
            call = self.constant_receiver(node, receiver)
        else:
            methods = self.constant(library.methods_named(node.name, len(args)))
            method = self.out.temp()

            def invoke(names: list[str]) -> str:
                listed = "".join(", " + name for name in names)
                return (f"({method}(B, {receiver}{listed}) if ({method} := {methods}.get(type({receiver}))) "
                        f"is not None else call_method(B, {receiver}, {node.name!r}, [{', '.join(names)}]))")
            call = self.sequence(args, invoke)
            if not args and node.name in _NUMBER_CONVERSIONS:
                # a JSON number's own conversion (result[m][i].floatValue()): inline
                value, test = _NUMBER_CONVERSIONS[node.name]
                call = f"({value.format(receiver)} if {test.format(receiver)} else {call})"
        if hoisted:
            if node.null_safe:
                return f"(None if ({receiver} := {self.expr(target)}) is None else {call})"
            return f"(({receiver} := {self.expr(target)}), {call})[1]"
        if node.null_safe and isinstance(target, Literal):
            return "None" if target.value is None else call
        if node.null_safe:
            return f"(None if {receiver} is None else {call})"
        return call

    def constant_receiver(self, node: Call, receiver: str) -> str:
        """A method of a constant (``"FLOAT32".equals(kind)``): found once, here."""
        value = node.target.value   # type: ignore[union-attr]
        if node.name == "equals" and len(node.args) == 1 and type(value) is str:
            # String.equals: the other is a String of the same characters
            t = self.out.temp()
            return f"(type({t} := {self.expr(node.args[0])}) is str and {t} == {receiver})"
        method = library.methods_named(node.name, len(node.args)).get(type(value))
        args = "".join(", " + self.expr(arg) for arg in node.args)
        if method is None:
            return f"call_method(B, {receiver}, {node.name!r}, [{args[2:]}])"
        return f"{self.constant(method)}(B, {receiver}{args})"

    def e_StaticCall(self, node: StaticCall) -> str:
        args = ", ".join(self.expr(arg) for arg in node.args)
        return f"call_static(B, {node.type!r}, {node.name!r}, [{args}])"

    def e_LocalCall(self, node: LocalCall) -> str:
        args = "".join(", " + self.expr(arg) for arg in node.args)
        callee = self.checked.callee(node)
        if isinstance(callee, CheckedFunction):
            # the callee counts on from the caller's steps, and the caller on from its
            return f"(u{callee.position}(steps_to(B, S){args}), (S := B.steps))[0]"
        return f"{self.constant(callee.fn)}(B{args})"

    def e_Unary(self, node: Unary) -> str:
        operand = self.expr(node.operand)
        if node.op == "!":
            return f"(not truthy({operand}, 'a ! operand'))"
        return f"unary({node.op!r}, {operand})"

    def e_Cast(self, node: Cast) -> str:
        return f"cast({self.expr(node.operand)}, {node.type.name!r}, {node.type.dims})"

    def e_Binary(self, node: Binary) -> str:
        op = node.op
        if op == "&&" or op == "||":
            word = "and" if op == "&&" else "or"
            return f"({self.condition(node.left, op)} {word} {self.condition(node.right, op)})"
        pair = [node.left, node.right]
        kinds = [self.known_type(node.left), self.known_type(node.right)]
        if op == "+":
            if any(isinstance(side, Binary) and side.op == "+" for side in pair) or str in kinds:
                # a chain of Strings: one call a term, so that long chains nest shallowly
                return f"plus(B, {self.expr(node.left)}, {self.expr(node.right)})"
            return self.sequence(pair, lambda n: self.arithmetic(op, n, kinds, f"plus(B, {n[0]}, {n[1]})"))
        if op == "==" or op == "!=":
            for side, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(side, Literal) and side.value is None:   # equals(x, null) is x == null
                    if isinstance(other, Literal):   # two constants: decided here
                        return repr((other.value is None) == (op == "=="))
                    return f"({self.expr(other)} {'is' if op == '==' else 'is not'} None)"
            negate = "" if op == "==" else "not "
            return self.sequence(pair, lambda n: (
                f"({n[0]} {op} {n[1]} if type({n[0]}) is type({n[1]}) and type({n[0]}) in EQUAL_FAST "
                f"else {negate}equals({n[0]}, {n[1]}))"))
        if op in _COMPARISONS:
            if any(kind is not None and kind not in PLAIN_NUMBERS for kind in kinds):
                return f"binary({op!r}, {self.expr(node.left)}, {self.expr(node.right)})"

            def compare(n: list[str]) -> str:
                checks = [f"type({name}) in PLAIN" for name, kind in zip(n, kinds) if kind is None]
                if not checks:
                    return f"({n[0]} {op} {n[1]})"
                return f"({n[0]} {op} {n[1]} if {' and '.join(checks)} else binary({op!r}, {n[0]}, {n[1]}))"
            return self.sequence(pair, compare)
        if op == "-" or op == "*":
            return self.sequence(pair, lambda n: self.arithmetic(op, n, kinds, f"binary({op!r}, {n[0]}, {n[1]})"))
        return f"binary({op!r}, {self.expr(node.left)}, {self.expr(node.right)})"

    def arithmetic(self, op: str, names: list[str], kinds: list[type | None], general: str) -> str:
        """``a op b`` for two ints within 32 bits whose result is too, or two doubles;
        else ``general`` (which wraps, promotes or refuses)."""
        branches = []
        if all(kind in (int, None) for kind in kinds):
            r = self.out.temp()
            checks = [f"type({name}) is int and {-INT_LIMIT} <= {name} < {INT_LIMIT}"
                      for name, kind in zip(names, kinds) if kind is None]
            checks.append(f"{-INT_LIMIT} <= ({r} := {names[0]} {op} {names[1]}) < {INT_LIMIT}")
            branches.append((r, " and ".join(checks)))
        if all(kind in (float, None) for kind in kinds):
            checks = [f"type({name}) is float" for name, kind in zip(names, kinds) if kind is None]
            if not checks:
                return f"({names[0]} {op} {names[1]})"
            branches.append((f"{names[0]} {op} {names[1]}", " and ".join(checks)))
        code = general
        for value, test in reversed(branches):
            code = f"{value} if {test} else {code}"
        return f"({code})"

    def e_InstanceOf(self, node: InstanceOf) -> str:
        return f"is_instance({self.expr(node.operand)}, {node.type.name!r}, {node.type.dims})"

    def e_Conditional(self, node: Conditional) -> str:
        test = self.condition(node.condition, "a ?: condition")
        return f"({self.expr(node.then)} if {test} else {self.expr(node.otherwise)})"

    def e_Elvis(self, node: Elvis) -> str:
        t = self.out.temp()
        return f"({self.expr(node.fallback)} if ({t} := {self.expr(node.value)}) is None else {t})"

    def e_Assign(self, node: Assign) -> str:
        op = node.op[:-1]   # "" for plain "="

        def compute(old: str) -> str:
            value = self.expr(node.value)
            return value if not op else f"compound(B, {op!r}, {old}, {value})"
        return self.assign(node.target, compute, narrow=bool(op), post=False)

    def e_Increment(self, node: Increment) -> str:
        target = node.target
        if isinstance(target, Variable):
            local = self.variable(target)
            new = f"({local} := {self.increment(node, target)})"
            return f"first({local}, {new})" if not node.prefix else new
        return self.assign(target, lambda old: f"compound(B, '+', {old}, {node.delta})", narrow=True,
                           post=not node.prefix)

    def assign(self, target: Expr, compute: Callable[[str], str], *, narrow: bool, post: bool) -> str:
        """Stores ``compute(old)`` into ``target``; the value is the new value (the old
        one for ``x++``). ``old`` is read before the new value is computed."""
        if isinstance(target, Variable):
            slot = self.checked.slot(target)
            local = f"v{slot.index}"
            store = self.narrowed if narrow else self.stored
            new = f"({local} := {store(compute(local), slot.type)})"
            return f"first({local}, {new})" if post else new
        if isinstance(target, Field):
            receiver, old = self.out.temp(), self.out.temp()
            read = f"({old} := get_field({receiver}, {target.name!r}))"
            if post:
                return (f"set_field_post(B, ({receiver} := {self.expr(target.target)}), {target.name!r}, "
                        f"{read}, {compute(old)})")
            value = compute(f"get_field({receiver}, {target.name!r})")
            return f"set_field(B, ({receiver} := {self.expr(target.target)}), {target.name!r}, {value})"
        assert isinstance(target, Index)
        receiver, key, old = self.out.temp(), self.out.temp(), self.out.temp()
        head = f"({receiver} := {self.expr(target.target)}), ({key} := {self.expr(target.index)})"
        if post:
            return f"set_index_post(B, {head}, ({old} := index_get({receiver}, {key})), {compute(old)})"
        return f"index_set(B, {head}, {compute(f'index_get({receiver}, {key})')})"


def _is_boolean(node: Expr) -> bool:
    """Whether ``node``'s translation always yields True or False (or raises)."""
    if isinstance(node, Binary):
        return node.op in _COMPARISONS or node.op in ("==", "!=", "&&", "||")
    if isinstance(node, Call):   # "FLOAT32".equals(kind): see constant_receiver
        return (node.name == "equals" and len(node.args) == 1 and isinstance(node.target, Literal)
                and type(node.target.value) is str)
    return (isinstance(node, Unary) and node.op == "!") or isinstance(node, InstanceOf) or \
        (isinstance(node, Literal) and type(node.value) is bool)


def _continues(block: Block) -> bool:
    """Whether ``block`` has a ``continue`` of its own loop (not of a loop inside it)."""
    stack: list[Any] = list(block.statements)
    while stack:
        node = stack.pop()
        if isinstance(node, Jump):
            if node.kind == "continue":
                return True
        elif isinstance(node, If):
            stack.extend(node.then.statements)
            if node.otherwise is not None:
                stack.extend(node.otherwise.statements)
        elif isinstance(node, Block):
            stack.extend(node.statements)
    return False

