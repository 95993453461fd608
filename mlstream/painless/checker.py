"""Checks a parsed ``syntax.Program`` and resolves its names, once, for both backends.

Pure. A variable used before it is declared or declared twice, a function that does not
exist, a method-less static, an unknown constructor, an array of ``void``, a ``break``
outside a loop or a ``void`` function returning a value is a ``ScriptError`` here, at
connector creation, naming its line and column. A checked program says where each
variable lives: a slot of its function's frame (slot 0 is left to the backend: the
closures keep the ``Budget`` there), never reused within the function, and what each
call of a script function reaches. The closures (``runtime``) and the Python
translation (``pysource``) both read these answers instead of resolving scopes again.

The checks run in the order the closures were once compiled in, so that a script with
several errors reports the same first one: an initialiser before the variable it
initialises, an assignment's value before its target, a call's arguments before the
function it calls, the functions before the script's body.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ScriptError
from . import library
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
    Function,
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

__all__ = ["Builtin", "Builtins", "CheckedFunction", "CheckedProgram", "Slot", "check"]

Builtins = dict[str, tuple[int, Callable[..., Any]]]   # name -> (arity, fn(budget, *args))


@dataclass(frozen=True, slots=True)
class Slot:
    """A variable: its place in its function's frame and its declared type."""

    index: int
    type: TypeName


@dataclass(frozen=True, slots=True)
class CheckedFunction:
    """A script function: its parameters' slots, in order, and how many slots its frame
    needs (slot 0 included). ``position``: its place among the program's functions."""

    node: Function
    position: int
    parameters: tuple[Slot, ...]
    frame_size: int


@dataclass(frozen=True, slots=True)
class Builtin:
    """A helper a script calls without declaring it (ml-commons' ``escape``)."""

    name: str
    fn: Callable[..., Any]


@dataclass(frozen=True, slots=True)
class CheckedProgram:
    """A program that passed the checks, with its names resolved. The answers are keyed
    by the identity of the syntax node they answer for (the nodes are frozen values, and
    the program holds them alive): ``slot(node)`` for a ``Variable`` or a ``ForEach``,
    ``declared(node)`` for a ``Declare``, ``callee(node)`` for a ``LocalCall``."""

    program: Program
    functions: tuple[CheckedFunction, ...]   # in the program's order
    frame_size: int                          # the body's frame, slot 0 included
    params_slot: int
    slots: Mapping[int, Slot]
    declarations: Mapping[int, tuple[Slot, ...]]
    callees: Mapping[int, CheckedFunction | Builtin]

    def slot(self, node: Variable | ForEach) -> Slot:
        return self.slots[id(node)]

    def declared(self, node: Declare) -> tuple[Slot, ...]:
        return self.declarations[id(node)]

    def callee(self, node: LocalCall) -> CheckedFunction | Builtin:
        return self.callees[id(node)]


def check(program: Program, builtins: Builtins) -> CheckedProgram:
    """``program`` checked and resolved. ``builtins``: helper functions a script may call
    without declaring them, unless it declares its own of that name."""
    return _Checker(program, builtins).check()


def _compile_error(line: int, column: int, message: str) -> ScriptError:
    return ScriptError(f"Painless compile error at line {line}, column {column}: {message}")


class _Scope:
    def __init__(self, parent: _Scope | None, counter: list[int]) -> None:
        self.parent = parent
        self.names: dict[str, Slot] = {}
        self.counter = counter   # shared by the function's scopes: slots are never reused

    def find(self, name: str) -> Slot | None:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def declare(self, name: str, type_: TypeName, line: int, column: int) -> Slot:
        if self.find(name) is not None:
            raise _compile_error(line, column, f"variable [{name}] is already defined")
        slot = Slot(self.counter[0], type_)
        self.counter[0] += 1
        self.names[name] = slot
        return slot


class _Checker:
    def __init__(self, program: Program, builtins: Builtins) -> None:
        self.program = program
        self.functions: dict[tuple[str, int], Function] = {}
        for function in program.functions:
            key = (function.name, len(function.parameters))
            if key in self.functions:
                raise _compile_error(function.line, function.column,
                                     f"function [{function.name}/{len(function.parameters)}] is already defined")
            self.functions[key] = function
        declared = {name for name, _ in self.functions}
        self.builtins = {name: value for name, value in builtins.items() if name not in declared}
        self.scope = _Scope(None, [1])
        self.loops = 0
        self.returns = TypeName("def")
        self.slots: dict[int, Slot] = {}
        self.declarations: dict[int, tuple[Slot, ...]] = {}
        # a call may come before the function it calls (functions may recurse): the calls
        # are resolved to a function's key here, to its CheckedFunction once all are checked
        self.calls: dict[int, tuple[str, int] | Builtin] = {}

    def check(self) -> CheckedProgram:
        functions = tuple(self.function(position, node) for position, node in enumerate(self.program.functions))
        self.scope = _Scope(None, [1])
        params_slot = self.scope.declare("params", TypeName("Map"), 0, 0).index
        self.returns = TypeName("String")
        self.statements(self.program.body, implicit_return=True)
        by_key = {(f.node.name, len(f.node.parameters)): f for f in functions}
        callees = {key: callee if isinstance(callee, Builtin) else by_key[callee]
                   for key, callee in self.calls.items()}
        return CheckedProgram(self.program, functions, self.scope.counter[0], params_slot, self.slots,
                              self.declarations, callees)

    def function(self, position: int, node: Function) -> CheckedFunction:
        self.scope = _Scope(None, [1])
        parameters = tuple(self.scope.declare(name, ptype, node.line, node.column) for ptype, name in node.parameters)
        self.returns = node.returns
        self.loops = 0
        self.statements(node.body.statements, implicit_return=False)
        return CheckedFunction(node, position, parameters, self.scope.counter[0])

    # ------------------------------------------------------------ statements

    def statements(self, statements: tuple[Statement, ...], *, implicit_return: bool) -> None:
        outer = self.scope
        self.scope = _Scope(outer, outer.counter)
        for position, statement in enumerate(statements):
            last = implicit_return and position == len(statements) - 1
            if last and isinstance(statement, ExprStatement):
                # Painless returns the value of a script's last expression statement.
                self.returned(statement.expr)
            else:
                self.statement(statement)
        self.scope = outer

    def block(self, block: Block) -> None:
        self.statements(block.statements, implicit_return=False)

    def loop_body(self, block: Block) -> None:
        self.loops += 1
        self.block(block)
        self.loops -= 1

    def statement(self, node: Statement) -> None:
        if isinstance(node, ExprStatement):
            self.expr(node.expr)
        elif isinstance(node, Declare):
            slots = []
            for name, init, line, column in node.names:
                if init is not None:
                    self.expr(init)
                slots.append(self.scope.declare(name, node.type, line, column))   # after init: "def x = x" fails
            self.declarations[id(node)] = tuple(slots)
        elif isinstance(node, If):
            self.expr(node.condition)
            self.block(node.then)
            if node.otherwise is not None:
                self.block(node.otherwise)
        elif isinstance(node, While):
            self.expr(node.condition)
            self.loop_body(node.body)
        elif isinstance(node, For):
            outer = self.scope
            self.scope = _Scope(outer, outer.counter)
            if node.init is not None:
                self.statement(node.init)
            for part in (node.condition, node.update):
                if part is not None:
                    self.expr(part)
            self.loop_body(node.body)
            self.scope = outer
        elif isinstance(node, ForEach):
            self.expr(node.iterable)
            outer = self.scope
            self.scope = _Scope(outer, outer.counter)
            self.slots[id(node)] = self.scope.declare(node.name, node.type, node.line, node.column)
            self.loop_body(node.body)
            self.scope = outer
        elif isinstance(node, Return):
            if node.value is not None:
                self.returned(node.value)
        elif isinstance(node, Throw):
            self.expr(node.value)
        elif isinstance(node, Jump):
            if not self.loops:
                raise _compile_error(node.line, node.column, f"{node.kind} outside of a loop")
        elif isinstance(node, Block):   # pragma: no cover - the parser makes no bare blocks
            self.block(node)
        else:  # pragma: no cover - the parser makes no other statements
            raise TypeError(f"not a statement: {node!r}")

    def returned(self, node: Expr) -> None:
        self.expr(node)
        if self.returns.name == "void":
            raise _compile_error(node.line, node.column, "a void function cannot return a value")

    # ------------------------------------------------------------ expressions

    def expr(self, node: Expr) -> None:
        # One Python frame a level of nesting, and a + chain walked without recursing:
        # fewer than the backends take, so that a script nested too deeply for them is
        # refused by them as it always was, not here.
        expr = self.expr
        if isinstance(node, Binary):
            if node.op == "+":
                for operand in concat_operands(node):
                    expr(operand)
            else:
                expr(node.left)
                expr(node.right)
        elif isinstance(node, Variable):
            self.slots[id(node)] = self.resolve(node)
        elif isinstance(node, Literal):
            pass
        elif isinstance(node, Call):
            expr(node.target)
            for arg in node.args:
                expr(arg)
        elif isinstance(node, Field):
            expr(node.target)
        elif isinstance(node, Index):
            expr(node.target)
            expr(node.index)
        elif isinstance(node, (Unary, Cast, InstanceOf)):
            expr(node.operand)
        elif isinstance(node, (Assign, Increment)):
            if isinstance(node, Assign):
                expr(node.value)   # the value first, as the closures were compiled
            target = node.target
            if isinstance(target, Variable):
                self.slots[id(target)] = self.resolve(target)
            elif isinstance(target, Field):
                expr(target.target)
            else:
                assert isinstance(target, Index)
                expr(target.target)
                expr(target.index)
        elif isinstance(node, LocalCall):
            self.local_call(node)
        elif isinstance(node, StaticCall):
            if not library.has_static(node.type, node.name, len(node.args)):
                raise _compile_error(node.line, node.column,
                                     f"static method [{node.type}.{node.name}/{len(node.args)}] is not available")
            for arg in node.args:
                expr(arg)
        elif isinstance(node, StaticField):
            if not library.has_static_field(node.type, node.name):
                raise _compile_error(node.line, node.column, f"static field [{node.type}.{node.name}] is not available")
        elif isinstance(node, NewObject):
            if not library.has_constructor(node.type, len(node.args)):
                raise _compile_error(node.line, node.column,
                                     f"constructor [{node.type}/{len(node.args)}] is not available to scripts")
            for arg in node.args:
                expr(arg)
        elif isinstance(node, NewArray):
            if node.type.name == "void":
                raise _compile_error(node.line, node.column, "an array of void")
            for item in node.items if node.items is not None else node.sizes:
                expr(item)
        elif isinstance(node, ListInit):
            for item in node.items:
                expr(item)
        elif isinstance(node, MapInit):
            for key, value in node.entries:
                expr(key)
                expr(value)
        elif isinstance(node, Conditional):
            expr(node.condition)
            expr(node.then)
            expr(node.otherwise)
        elif isinstance(node, Elvis):
            expr(node.value)
            expr(node.fallback)
        else:  # pragma: no cover - the parser makes no other expressions
            raise TypeError(f"not an expression: {node!r}")

    def resolve(self, node: Variable) -> Slot:
        slot = self.scope.find(node.name)
        if slot is None:
            raise _compile_error(node.line, node.column, f"cannot resolve symbol [{node.name}]")
        return slot

    def local_call(self, node: LocalCall) -> None:
        for arg in node.args:
            self.expr(arg)
        key = (node.name, len(node.args))
        if key in self.functions:
            self.calls[id(node)] = key
            return
        builtin = self.builtins.get(node.name)
        if builtin is not None and builtin[0] == len(node.args):
            self.calls[id(node)] = Builtin(node.name, builtin[1])
            return
        raise _compile_error(node.line, node.column, f"unknown function [{node.name}/{len(node.args)}]")
