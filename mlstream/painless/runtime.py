"""Compiles a checked program (``checker.CheckedProgram``) into Python closures and runs
it, or its translation (``pysource``), within a ``Budget``.

Pure. The checker has resolved every name, so compiling cannot fail. At run time every
statement, loop iteration and call costs a step; strings and collections are charged
to the allocation budget; a Java exception (``Fault``) or a spent budget becomes a
``ScriptError`` naming the line it happened on (``semantics.script_error``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from . import library
from .arguments import map_key
from .budget import Budget, Limits
from .checker import Builtins, CheckedFunction, CheckedProgram, check
from .operators import binary, equals, truthy
from .semantics import (
    INT_LIMIT,
    SCRIPT_FAILURES,
    Concat,
    append_concat,
    append_value,
    builder_text,
    compound,
    default_value,
    index_get,
    index_set,
    iteration,
    no_return,
    plus,
    script_error,
    steps_spent,
    throw,
    too_deep,
    unary,
)
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
from .values import JArray, LazyText

__all__ = ["CompiledScript", "compile_checked", "compile_program"]

Frame = list            # slot 0: the Budget; then the function's variables
Eval = Callable[[Frame], Any]
Exec = Callable[[Frame], Any]   # None, BREAK, CONTINUE or a _Returned

BREAK = object()
CONTINUE = object()


class _Returned:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class CompiledScript:
    """A compiled script: ``run(params, limits)`` returns the script's value. It runs
    as closures, or as the Python function ``pysource`` translated it to, when given."""

    def __init__(self, body: Exec, frame_size: int, params_slot: int,
                 translated: Callable[[Budget, dict[str, Any]], Any] | None = None) -> None:
        self._body = body
        self._frame_size = frame_size
        self._params_slot = params_slot
        self.translated = translated

    def translated_to(self, translated: Callable[[Budget, dict[str, Any]], Any] | None) -> CompiledScript:
        return CompiledScript(self._body, self._frame_size, self._params_slot, translated)

    def run(self, params: dict[str, Any], limits: Limits, *, lazy: bool = False, params_table: int = 0) -> Any:
        """The script's value; with ``lazy``, a String it returns may be a ``LazyText``.
        ``params_table``: as ``Script.run`` has it."""
        budget = Budget(limits, params, params_table)
        try:
            if self.translated is not None:
                outcome = self.translated(budget, params)
            else:
                frame: Frame = [None] * self._frame_size
                frame[0] = budget
                frame[self._params_slot] = params
                outcome = self._body(frame)
        except SCRIPT_FAILURES as error:
            # the translated code gives a failure its line; the closures keep it in the budget
            raise script_error(error, getattr(error, "painless_line", budget.line)) from None
        if isinstance(outcome, _Returned):
            outcome = outcome.value
        if type(outcome) is LazyText and not lazy:
            return outcome.text()
        return outcome


def compile_program(program: Program, builtins: Builtins) -> CompiledScript:
    """``program`` checked (``checker.check``: a ``ScriptError`` names the place) and
    compiled to closures."""
    return compile_checked(check(program, builtins))


def compile_checked(checked: CheckedProgram) -> CompiledScript:
    return _Compiler(checked).compile()


class _Compiler:
    def __init__(self, checked: CheckedProgram) -> None:
        self.checked = checked
        # per function: [body, frame size, [(slot, type) per parameter]], the body filled
        # once compiled (a call may be compiled before its function: functions may recurse)
        self.code: dict[int, list] = {
            function.position: [None, function.frame_size, [(slot.index, slot.type) for slot in function.parameters]]
            for function in checked.functions}
        self.returns: TypeName = TypeName("def")
        self.top_level = False   # compiling the script's body, whose return ends the run

    # ------------------------------------------------------------ program

    def compile(self) -> CompiledScript:
        checked = self.checked
        for function in checked.functions:
            self.returns = function.node.returns
            self.code[function.position][0] = self.statements(function.node.body.statements, implicit_return=False)
        self.returns = TypeName("String")
        self.top_level = True
        body = self.statements(checked.program.body, implicit_return=True)
        self.top_level = False
        return CompiledScript(body, checked.frame_size, checked.params_slot)

    # ------------------------------------------------------------ statements

    def statements(self, statements: tuple[Statement, ...], *, implicit_return: bool) -> Exec:
        compiled: list[Exec] = []
        for position, statement in enumerate(statements):
            last = implicit_return and position == len(statements) - 1
            if last and isinstance(statement, ExprStatement):
                # Painless returns the value of a script's last expression statement.
                compiled.append(self.stepped(statement.line, self.return_of(statement.expr, statement.line)))
            else:
                compiled.append(self.statement(statement))
        code = tuple(compiled)
        if len(code) == 1:
            return code[0]

        def block(frame: Frame) -> Any:
            for run in code:
                outcome = run(frame)
                if outcome is not None:
                    return outcome
            return None
        return block

    def block(self, block: Block) -> Exec:
        return self.statements(block.statements, implicit_return=False)

    def statement(self, node: Statement) -> Exec:
        if isinstance(node, ExprStatement):   # the commonest: its value is dropped
            return self.stepped(node.line, self.expr(node.expr), expression=True)
        return self.stepped(node.line, self._statement(node))

    def stepped(self, line: int, inner: Exec, *, expression: bool = False) -> Exec:
        """``inner`` as one step of the script, on ``line``."""
        def step(frame: Frame) -> Any:
            budget = frame[0]
            budget.line = line
            budget.steps += 1
            if budget.steps > budget.limits.max_steps:
                steps_spent(budget)
            outcome = inner(frame)
            return None if expression else outcome
        return step

    def _statement(self, node: Statement) -> Exec:
        if isinstance(node, ExprStatement):
            expr = self.expr(node.expr)

            def run_expr(frame: Frame) -> None:
                expr(frame)
            return run_expr
        if isinstance(node, Declare):
            return self.declare(node)
        if isinstance(node, If):
            return self.if_(node)
        if isinstance(node, While):
            return self.while_(node)
        if isinstance(node, For):
            return self.for_(node)
        if isinstance(node, ForEach):
            return self.for_each(node)
        if isinstance(node, Return):
            if node.value is None:
                returned = _Returned(None)
                return lambda frame: returned
            return self.return_of(node.value, node.line)
        if isinstance(node, Throw):
            value = self.expr(node.value)

            return lambda frame: throw(value(frame))
        if isinstance(node, Jump):
            signal = BREAK if node.kind == "break" else CONTINUE
            return lambda frame: signal
        if isinstance(node, Block):   # pragma: no cover - the parser makes no bare blocks
            return self.block(node)
        raise AssertionError(node)  # pragma: no cover

    def return_of(self, node: Expr, line: int) -> Exec:
        value = self.lazy_text(node) if self.top_level else None
        if value is not None:
            # the script's String result: the caller joins its parts, or reads the numbers
            # of the ListPrints in it without printing them (processing.post_process_script)
            def return_lazy(frame: Frame) -> _Returned:
                result = value(frame)
                if type(result) is LazyText:
                    return _Returned(result)
                return _Returned(library.coerce(result, "String", 0, "as the return value"))
            return return_lazy
        value = self.expr(node)
        rtype = self.returns
        if rtype.name == "def" and not rtype.dims:
            return lambda frame: _Returned(value(frame))

        def ret(frame: Frame) -> _Returned:
            return _Returned(library.coerce(value(frame), rtype.name, rtype.dims, "as the return value"))
        return ret

    def declare(self, node: Declare) -> Exec:
        assigns: list[tuple[int, Eval | None]] = []
        type_ = node.type
        for (_, init, _, _), slot in zip(node.names, self.checked.declared(node)):
            assigns.append((slot.index, self.expr(init) if init is not None else None))
        default = default_value(type_)
        store = self.storer(type_)
        items = tuple(assigns)

        def declare(frame: Frame) -> None:
            for index, value in items:
                frame[index] = default if value is None else store(value(frame))
        return declare

    def storer(self, type_: TypeName) -> Callable[[Any], Any]:
        if type_.name == "def" and not type_.dims:
            return lambda value: value
        name, dims = type_.name, type_.dims
        return lambda value: library.coerce(value, name, dims)

    def condition(self, node: Expr, where: str) -> Eval:
        value = self.expr(node)

        def check(frame: Frame) -> bool:
            result = value(frame)
            if result is True or result is False:
                return result
            return truthy(result, where)
        return check

    def if_(self, node: If) -> Exec:
        condition = self.condition(node.condition, "an if condition")
        then = self.block(node.then)
        otherwise = self.block(node.otherwise) if node.otherwise is not None else None

        def run_if(frame: Frame) -> Any:
            if condition(frame):
                return then(frame)
            if otherwise is not None:
                return otherwise(frame)
            return None
        return run_if

    def while_(self, node: While) -> Exec:
        condition = self.condition(node.condition, "a while condition")
        return _loop(None, condition, None, self.block(node.body), node.do_first)

    def for_(self, node: For) -> Exec:
        init = self._statement(node.init) if node.init is not None else None
        condition = self.condition(node.condition, "a for condition") if node.condition is not None else None
        update = self.expr(node.update) if node.update is not None else None
        return _loop(init, condition, update, self.block(node.body), False)

    def for_each(self, node: ForEach) -> Exec:
        iterable = self.expr(node.iterable)
        slot = self.checked.slot(node).index
        store = self.storer(node.type)
        body = self.block(node.body)

        def run_each(frame: Frame) -> Any:
            budget = frame[0]
            for item in iteration(iterable(frame)):
                _tick(budget)
                frame[slot] = store(item)
                outcome = body(frame)
                if outcome is not None:
                    if outcome is BREAK:
                        break
                    if outcome is not CONTINUE:
                        return outcome
            return None
        return run_each

    # ------------------------------------------------------------ lazy strings

    def lazy_text(self, node: Expr) -> Eval | None:
        """``node``'s value with Lists of doubles in it left unprinted (a ``LazyText``),
        when ``node`` is a ``+`` chain or ``sb.toString()``; None for other nodes."""
        if isinstance(node, Binary) and node.op == "+":
            concat = self.concat(node)

            def lazy_concat(frame: Frame) -> Any:
                value, parts, _, _ = concat(frame)
                return value if parts is None else LazyText(parts)
            return lazy_concat
        if isinstance(node, Call) and node.name == "toString" and not node.args:
            target, null_safe = self.expr(node.target), node.null_safe
            return lambda frame: builder_text(frame[0], target(frame), null_safe)
        return None

    def concat(self, node: Binary) -> Callable[[Frame], tuple[Any, list | None, int, list]]:
        """A left-leaning ``a + b + c`` chain, run by ``Concat``."""
        code = tuple(self.expr(operand) for operand in concat_operands(node))
        first, rest = code[0], code[1:]

        def run_concat(frame: Frame) -> tuple[Any, list | None, int, list]:
            chain = Concat(frame[0], first(frame))
            for operand in rest:
                chain.add(operand(frame))
            return chain.result()
        return run_concat

    # ------------------------------------------------------------ expressions

    def expr(self, node: Expr) -> Eval:
        method = getattr(self, "e_" + type(node).__name__)
        return method(node)

    def e_Literal(self, node: Literal) -> Eval:
        value = node.value
        return lambda frame: value

    def e_Variable(self, node: Variable) -> Eval:
        index = self.checked.slot(node).index
        return lambda frame: frame[index]

    def e_ListInit(self, node: ListInit) -> Eval:
        items = tuple(self.expr(item) for item in node.items)

        def make_list(frame: Frame) -> list:
            frame[0].charge(len(items))
            return [item(frame) for item in items]
        return make_list

    def e_MapInit(self, node: MapInit) -> Eval:
        entries = tuple((self.expr(k), self.expr(v)) for k, v in node.entries)

        def make_map(frame: Frame) -> dict:
            frame[0].charge(len(entries))
            return {map_key(key(frame)): value(frame) for key, value in entries}
        return make_map

    def e_NewObject(self, node: NewObject) -> Eval:
        args = tuple(self.expr(arg) for arg in node.args)
        type_ = node.type
        return lambda frame: library.construct(frame[0], type_, [arg(frame) for arg in args])

    def e_NewArray(self, node: NewArray) -> Eval:
        element, dims = node.type.name, node.type.dims
        if node.items is not None:
            items = tuple(self.expr(item) for item in node.items)
            inner = TypeName(element, dims - 1)
            store = self.storer(inner)

            def init_array(frame: Frame) -> JArray:
                frame[0].charge(len(items))
                return JArray([store(item(frame)) for item in items], element + "[]" * (dims - 1))
            return init_array
        sizes = tuple(self.expr(size) for size in node.sizes)
        return lambda frame: library.new_array(frame[0], element, dims, [size(frame) for size in sizes])

    def e_Field(self, node: Field) -> Eval:
        target = self.expr(node.target)
        name = node.name
        get = library.get_field
        if node.null_safe:
            def null_safe_field(frame: Frame) -> Any:
                value = target(frame)
                return None if value is None else get(value, name)
            return null_safe_field

        def field(frame: Frame) -> Any:
            value = target(frame)
            if type(value) is dict:
                return value.get(name)
            return get(value, name)
        return field

    def e_StaticField(self, node: StaticField) -> Eval:
        value = library.static_field(node.type, node.name)
        return lambda frame: value

    def e_Index(self, node: Index) -> Eval:
        target = self.expr(node.target)
        index = self.expr(node.index)
        def get(frame: Frame) -> Any:
            container, where = target(frame), index(frame)
            if type(container) is list and type(where) is int and 0 <= where < len(container):
                return container[where]
            return index_get(container, where)
        return get

    def e_Call(self, node: Call) -> Eval:
        target = self.expr(node.target)
        name, null_safe = node.name, node.null_safe
        if name == "append" and len(node.args) == 1:
            return self._append(target, node.args[0], null_safe)
        args = tuple(self.expr(arg) for arg in node.args)
        call = library.call_method
        methods = library.methods_named(name, len(args))   # receiver type -> method

        def invoke(frame: Frame) -> Any:
            receiver = target(frame)
            method = methods.get(type(receiver))
            if method is not None:
                return method(frame[0], receiver, *[arg(frame) for arg in args])
            if receiver is None and null_safe:
                return None
            return call(frame[0], receiver, name, [arg(frame) for arg in args])
        return invoke

    def _append(self, target: Eval, arg: Expr, null_safe: bool) -> Eval:
        # StringBuilder.append is the hot path of the published scripts: inline it, and
        # leave the Lists of doubles added to it unprinted (ListPrint) until it is read.
        if isinstance(arg, Binary) and arg.op == "+":
            pieces = self.concat(arg)

            def append_concatenated(frame: Frame) -> Any:
                receiver = target(frame)
                if receiver is None and null_safe:
                    return None
                return append_concat(frame[0], receiver, pieces(frame))
            return append_concatenated
        value = self.expr(arg)

        def append(frame: Frame) -> Any:
            receiver = target(frame)
            if receiver is None and null_safe:
                return None
            return append_value(frame[0], receiver, value(frame))
        return append

    def e_StaticCall(self, node: StaticCall) -> Eval:
        args = tuple(self.expr(arg) for arg in node.args)
        type_, name = node.type, node.name
        return lambda frame: library.call_static(frame[0], type_, name, [arg(frame) for arg in args])

    def e_LocalCall(self, node: LocalCall) -> Eval:
        args = tuple(self.expr(arg) for arg in node.args)
        callee = self.checked.callee(node)
        if isinstance(callee, CheckedFunction):
            return self._user_call(callee, args)
        fn = callee.fn
        return lambda frame: fn(frame[0], *[arg(frame) for arg in args])

    def _user_call(self, function: CheckedFunction, args: tuple[Eval, ...]) -> Eval:
        code = self.code[function.position]
        returns = function.node.returns

        def call(frame: Frame) -> Any:
            budget = frame[0]
            values = [arg(frame) for arg in args]
            _tick(budget)
            if budget.depth >= budget.limits.max_call_depth:
                too_deep(budget)
            body, size, slots = code
            inner: Frame = [None] * size
            inner[0] = budget
            for (index, ptype), value in zip(slots, values):
                inner[index] = value if ptype.name == "def" and not ptype.dims else \
                    library.coerce(value, ptype.name, ptype.dims, "as an argument")
            line = budget.line
            budget.depth += 1
            try:
                outcome = body(inner)
            finally:
                budget.depth -= 1
            budget.line = line
            if isinstance(outcome, _Returned):
                return outcome.value
            if returns.name != "void" and returns.name != "def" and not returns.name[0].isupper():
                no_return()
            return None
        return call

    def e_Unary(self, node: Unary) -> Eval:
        operand = self.expr(node.operand)
        op = node.op
        if op == "!":
            return lambda frame: not truthy(operand(frame), "a ! operand")
        return lambda frame: unary(op, operand(frame))

    def e_Cast(self, node: Cast) -> Eval:
        operand = self.expr(node.operand)
        name, dims = node.type.name, node.type.dims
        return lambda frame: library.cast(operand(frame), name, dims)

    def e_Binary(self, node: Binary) -> Eval:
        left, right = self.expr(node.left), self.expr(node.right)
        op = node.op
        if op == "&&":
            return lambda frame: truthy(left(frame), "&&") and truthy(right(frame), "&&")
        if op == "||":
            return lambda frame: truthy(left(frame), "||") or truthy(right(frame), "||")
        if op == "+":
            return lambda frame: plus(frame[0], left(frame), right(frame))
        if op == "==":
            return lambda frame: equals(left(frame), right(frame))
        if op == "!=":
            return lambda frame: not equals(left(frame), right(frame))
        if op in _FAST_OPS:
            return _fast_binary(op, left, right)
        return lambda frame: binary(op, left(frame), right(frame))

    def e_InstanceOf(self, node: InstanceOf) -> Eval:
        operand = self.expr(node.operand)
        name, dims = node.type.name, node.type.dims
        return lambda frame: library.is_instance(operand(frame), name, dims)

    def e_Conditional(self, node: Conditional) -> Eval:
        condition = self.condition(node.condition, "a ?: condition")
        then, otherwise = self.expr(node.then), self.expr(node.otherwise)
        return lambda frame: then(frame) if condition(frame) else otherwise(frame)

    def e_Elvis(self, node: Elvis) -> Eval:
        value, fallback = self.expr(node.value), self.expr(node.fallback)

        def elvis(frame: Frame) -> Any:
            result = value(frame)
            return fallback(frame) if result is None else result
        return elvis

    def e_Assign(self, node: Assign) -> Eval:
        value = self.expr(node.value)
        op = node.op[:-1]   # "" for plain "="
        return self.assigner(node.target, lambda frame, old: value(frame) if not op
                             else compound(frame[0], op, old, value(frame)), needs_old=bool(op),
                             narrow=bool(op))

    def e_Increment(self, node: Increment) -> Eval:
        delta = node.delta

        def update(frame: Frame, old: Any) -> Any:
            return compound(frame[0], "+", old, delta)
        general = self.assigner(node.target, update, needs_old=True, narrow=True, post=not node.prefix)
        slot = self.checked.slot(node.target) if isinstance(node.target, Variable) else None
        if slot is None or slot.type.dims or slot.type.name not in ("int", "def"):
            return general
        index, post = slot.index, not node.prefix

        def increment(frame: Frame) -> Any:
            # i++ on an int, the loop counter: what the general path makes of it, in one step
            old = frame[index]
            if type(old) is int and -INT_LIMIT <= old + delta < INT_LIMIT and -INT_LIMIT <= old:
                frame[index] = old + delta
                return old if post else old + delta
            return general(frame)
        return increment

    def assigner(self, target: Expr, compute: Callable[[Frame, Any], Any], *, needs_old: bool,
                 narrow: bool, post: bool = False) -> Eval:
        """Stores ``compute(frame, old)`` into ``target``; the expression's value is the new
        value (or the old one for ``x++``)."""
        if isinstance(target, Variable):
            slot = self.checked.slot(target)
            index, type_ = slot.index, slot.type
            store = self.storer(type_) if not narrow else _narrower(type_)

            def set_variable(frame: Frame) -> Any:
                old = frame[index]
                new = store(compute(frame, old))
                frame[index] = new
                return old if post else new
            return set_variable
        if isinstance(target, Field):
            obj = self.expr(target.target)
            name = target.name

            def set_field(frame: Frame) -> Any:
                receiver = obj(frame)
                old = library.get_field(receiver, name) if needs_old else None
                new = compute(frame, old)
                library.set_field(frame[0], receiver, name, new)
                return old if post else new
            return set_field
        assert isinstance(target, Index)
        container, key = self.expr(target.target), self.expr(target.index)

        def set_index(frame: Frame) -> Any:
            receiver, where = container(frame), key(frame)
            old = index_get(receiver, where) if needs_old else None
            new = compute(frame, old)
            new = index_set(frame[0], receiver, where, new)
            return old if post else new
        return set_index


_FAST_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
             "-": operator.sub, "*": operator.mul}


def _fast_binary(op: str, left: Eval, right: Eval) -> Eval:
    """``binary(op, ...)`` with the common cases first: two doubles, or two ints (not longs:
    a result outside 32 bits goes to ``binary``, which wraps it)."""
    apply = _FAST_OPS[op]

    def fast(frame: Frame) -> Any:
        a, b = left(frame), right(frame)
        kind = type(a)
        if kind is type(b):
            if kind is float:
                return apply(a, b)
            if kind is int and -INT_LIMIT <= a < INT_LIMIT and -INT_LIMIT <= b < INT_LIMIT:
                value = apply(a, b)
                if type(value) is bool or -INT_LIMIT <= value < INT_LIMIT:
                    return value
        return binary(op, a, b)
    return fast


def _loop(init: Exec | None, condition: Eval | None, update: Eval | None, body: Exec, do_first: bool) -> Exec:
    """``for (init; condition; update) body``; ``while`` is one without init and update,
    ``do``/``while`` one whose first turn skips the condition."""
    def run_loop(frame: Frame) -> Any:
        budget = frame[0]
        if init is not None:
            init(frame)
        first = do_first
        while first or condition is None or condition(frame):
            first = False
            _tick(budget)
            outcome = body(frame)
            if outcome is not None:
                if outcome is BREAK:
                    break
                if outcome is not CONTINUE:
                    return outcome
            if update is not None:
                update(frame)
        return None
    return run_loop


def _tick(budget: Budget) -> None:
    budget.steps += 1
    if budget.steps > budget.limits.max_steps:
        steps_spent(budget)


def _narrower(type_: TypeName) -> Callable[[Any], Any]:
    """Compound assignment and ++ cast the result back to the variable's type (Java's rule)."""
    if type_.name == "def" and not type_.dims:
        return lambda value: value
    name, dims = type_.name, type_.dims
    if not dims and name in ("int", "long", "short", "byte", "float", "double", "char"):
        return lambda value: library.cast(value, name, 0)
    return lambda value: library.coerce(value, name, dims)


