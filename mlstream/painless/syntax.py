"""The Painless abstract syntax tree: frozen values, each with the line and column it starts at."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TypeName:
    name: str          # "def", "int", "String", ...
    dims: int = 0      # array dimensions: "def[]" has 1


# ------------------------------------------------------------------ expressions

@dataclass(frozen=True, slots=True)
class Literal:
    value: object
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class ListInit:
    items: tuple[Expr, ...]
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class MapInit:
    entries: tuple[tuple[Expr, Expr], ...]
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class NewObject:
    type: str
    args: tuple[Expr, ...]
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class NewArray:
    type: TypeName                     # the element type with all dimensions
    sizes: tuple[Expr, ...]          # new T[n][m]
    items: tuple[Expr, ...] | None   # new T[] {a, b}
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Field:
    target: Expr
    name: str
    null_safe: bool
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class StaticField:
    type: str
    name: str
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Index:
    target: Expr
    index: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Call:
    target: Expr
    name: str
    args: tuple[Expr, ...]
    null_safe: bool
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class StaticCall:
    type: str
    name: str
    args: tuple[Expr, ...]
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class LocalCall:
    name: str
    args: tuple[Expr, ...]
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Unary:
    op: str                            # "!", "~", "+", "-"
    operand: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Cast:
    type: TypeName
    operand: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: Expr
    right: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class InstanceOf:
    operand: Expr
    type: TypeName
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Conditional:
    condition: Expr
    then: Expr
    otherwise: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Elvis:
    value: Expr
    fallback: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Assign:
    target: Expr                     # Variable, Field or Index
    op: str                            # "=", "+=", ...
    value: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Increment:
    target: Expr
    delta: int                         # +1 or -1
    prefix: bool
    line: int
    column: int


Expr = (Literal | Variable | ListInit | MapInit | NewObject | NewArray | Field | StaticField | Index | Call
        | StaticCall | LocalCall | Unary | Cast | Binary | InstanceOf | Conditional | Elvis | Assign | Increment)


# ------------------------------------------------------------------ statements

@dataclass(frozen=True, slots=True)
class Declare:
    type: TypeName
    names: tuple[tuple[str, Expr | None, int, int], ...]   # name, initializer, line, column
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class ExprStatement:
    expr: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class If:
    condition: Expr
    then: Block
    otherwise: Block | None
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class While:
    condition: Expr
    body: Block
    do_first: bool                     # do { } while (...)
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class For:
    init: Declare | ExprStatement | None
    condition: Expr | None
    update: Expr | None
    body: Block
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class ForEach:
    type: TypeName
    name: str
    iterable: Expr
    body: Block
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Return:
    value: Expr | None
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Throw:
    value: Expr
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Jump:
    kind: str                          # "break" or "continue"
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Block:
    statements: tuple[Statement, ...]
    line: int
    column: int


Statement = (Declare | ExprStatement | If | While | For | ForEach | Return | Throw | Jump | Block)


@dataclass(frozen=True, slots=True)
class Function:
    returns: TypeName
    name: str
    parameters: tuple[tuple[TypeName, str], ...]
    body: Block
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Program:
    functions: tuple[Function, ...]
    body: tuple[Statement, ...]


def concat_operands(node: Binary) -> list[Expr]:
    """The operands of a left-leaning ``a + b + c`` chain, left to right."""
    operands: list[Expr] = []
    left: Expr = node
    while isinstance(left, Binary) and left.op == "+":
        operands.append(left.right)
        left = left.left
    operands.append(left)
    operands.reverse()
    return operands
