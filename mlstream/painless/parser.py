"""Painless source to a ``syntax.Program``, after OpenSearch's ``PainlessParser.g4``.

Pure. The grammar's rules and precedence are kept (``source: function* statement* EOF``;
the last statement of the script or of a block may omit its ``;``). Constructs the
published scripts never use and that would reach past the script's own values —
lambdas, method references, regexes, ``try``/``catch``, ``for (x in y)`` — are refused
with the line, column and the construct's name. ``return;`` without a value is
accepted (it returns null).
"""

from __future__ import annotations

from ..errors import ScriptError
from .lexer import Token, tokenize
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
)
from .values import JFloat, JLong

__all__ = ["MAX_NESTING", "parse"]

MAX_NESTING = 32   # nested blocks and parenthesised expressions: deeper is refused, not recursed

_ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "&=", "^=", "|=", "<<=", ">>=", ">>>="})
# Binary operators by precedence, lowest first (PainlessParser.g4 lists them highest first).
_LEVELS: tuple[frozenset[str], ...] = (
    frozenset({"||"}), frozenset({"&&"}), frozenset({"|"}), frozenset({"^"}), frozenset({"&"}),
    frozenset({"==", "===", "!=", "!=="}), frozenset(), frozenset({"<", "<=", ">", ">="}),
    frozenset({"<<", ">>", ">>>"}), frozenset({"+", "-"}), frozenset({"*", "/", "%"}),
)
_INSTANCEOF_LEVEL = 6
_REFUSED_OPS = {"->": "lambda", "::": "method reference", "=~": "regex find (=~)", "==~": "regex match (==~)"}


def parse(source: str) -> Program:
    return _Parser(tokenize(source)).program()


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    # ------------------------------------------------------------ helpers

    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def at(self, text: str, kind: str | None = None) -> bool:
        tok = self.tok
        return tok.text == text and tok.kind in ((kind,) if kind else ("op", "keyword"))

    def take(self) -> Token:
        tok = self.tok
        if tok.kind != "eof":
            self.pos += 1
        return tok

    def error(self, message: str, tok: Token | None = None) -> ScriptError:
        tok = tok or self.tok
        return ScriptError(f"Painless syntax error at line {tok.line}, column {tok.column}: {message}")

    def unsupported(self, construct: str, tok: Token | None = None) -> ScriptError:
        tok = tok or self.tok
        return ScriptError(f"Painless construct not supported at line {tok.line}, column {tok.column}: "
                           f"{construct}")

    def found(self) -> str:
        tok = self.tok
        return "the end of the script" if tok.kind == "eof" else repr(tok.text)

    def expect(self, text: str, what: str = "") -> Token:
        if not self.at(text):
            if self.tok.kind == "op" and self.tok.text in _REFUSED_OPS:
                raise self.unsupported(_REFUSED_OPS[self.tok.text])
            raise self.error(f"expected '{text}'{what}, found {self.found()}")
        return self.take()

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"nested more than {MAX_NESTING} levels deep")

    # ------------------------------------------------------------ program and functions

    def program(self) -> Program:
        functions: list[Function] = []
        while self.is_function_start():
            functions.append(self.function())
        body: list[Statement] = []
        while self.tok.kind != "eof":
            body.append(self.statement(top=True))
        return Program(tuple(functions), tuple(body))

    def is_type_start(self) -> bool:
        return self.tok.kind == "type"

    def decl_type_length(self) -> int:
        """Tokens of a ``decltype`` here (``TYPE ([ ])*``), 0 if there is none."""
        if self.tok.kind != "type":
            return 0
        k = 1
        while self.peek(k).text == "[" and self.peek(k + 1).text == "]":
            k += 2
        return k

    def is_function_start(self) -> bool:
        k = self.decl_type_length()
        return bool(k) and self.peek(k).kind == "id" and self.peek(k + 1).text == "("

    def decltype(self) -> TypeName:
        tok = self.tok
        if tok.kind != "type":
            raise self.error(f"expected a type, found {self.found()}")
        self.take()
        dims = 0
        while self.at("[") and self.peek().text == "]":
            self.take()
            self.take()
            dims += 1
        return TypeName(tok.text, dims)

    def function(self) -> Function:
        start = self.tok
        returns = self.decltype()
        name = self.take().text
        self.expect("(")
        parameters: list[tuple[TypeName, str]] = []
        if not self.at(")"):
            while True:
                ptype = self.decltype()
                if self.tok.kind != "id":
                    raise self.error(f"expected a parameter name, found {self.found()}")
                parameters.append((ptype, self.take().text))
                if not self.at(","):
                    break
                self.take()
        self.expect(")", " to close the parameter list")
        if not self.at("{"):
            raise self.error(f"expected '{{' to open the body of function {name}, found {self.found()}")
        return Function(returns, name, tuple(parameters), self.block(), start.line, start.column)

    # ------------------------------------------------------------ statements

    def block(self) -> Block:
        start = self.expect("{")
        self.nest()
        statements: list[Statement] = []
        while not self.at("}"):
            if self.tok.kind == "eof":
                raise self.error(f"expected '}}' to close the block opened at line {start.line}, "
                                 f"column {start.column}, found the end of the script")
            statements.append(self.statement(top=False))
        self.take()
        self.depth -= 1
        return Block(tuple(statements), start.line, start.column)

    def trailer(self) -> Block:
        """A loop or if body: a block, or one statement."""
        if self.at("{"):
            return self.block()
        tok = self.tok
        self.nest()
        statement = self.statement(top=False)
        self.depth -= 1
        return Block((statement,), tok.line, tok.column)

    def statement(self, *, top: bool) -> Statement:
        tok = self.tok
        if tok.kind == "keyword":
            word = tok.text
            if word == "if":
                return self.if_statement()
            if word == "while":
                self.take()
                self.expect("(")
                condition = self.expression()
                self.expect(")")
                if self.at(";"):
                    self.take()
                    return While(condition, Block((), tok.line, tok.column), False, tok.line, tok.column)
                return While(condition, self.trailer(), False, tok.line, tok.column)
            if word == "for":
                return self.for_statement()
            if word == "try":
                raise self.unsupported("try/catch", tok)
        if tok.kind == "op" and tok.text == "{":
            raise self.error("a block '{' must follow if, else, for, while or do")
        statement = self.dstatement()
        if self.at(";"):
            self.take()
        elif not (self.tok.kind == "eof" or (not top and self.at("}"))):
            if self.tok.kind == "op" and self.tok.text in _REFUSED_OPS:
                raise self.unsupported(_REFUSED_OPS[self.tok.text])
            raise self.error(f"expected ';' after the statement, found {self.found()}")
        return statement

    def if_statement(self) -> If:
        tok = self.take()
        self.expect("(", " after if")
        condition = self.expression()
        self.expect(")", " to close the if condition")
        then = self.trailer()
        otherwise = None
        if self.at("else"):
            self.take()
            otherwise = self.trailer()
        return If(condition, then, otherwise, tok.line, tok.column)

    def for_statement(self) -> Statement:
        tok = self.take()
        self.expect("(", " after for")
        k = self.decl_type_length()
        if k and self.peek(k).kind == "id" and self.peek(k + 1).text == ":":
            ftype = self.decltype()
            name = self.take().text
            self.take()
            iterable = self.expression()
            self.expect(")", " to close the for-each header")
            return ForEach(ftype, name, iterable, self.trailer(), tok.line, tok.column)
        if self.tok.kind == "id" and self.peek().text == "in":
            raise self.unsupported("for (x in y) loop: write for (def x : y)")
        init: Declare | ExprStatement | None = None
        if not self.at(";"):
            if self.is_declaration():
                init = self.declaration()
            else:
                first = self.tok
                init = ExprStatement(self.expression(), first.line, first.column)
        self.expect(";", " in the for header")
        condition = None if self.at(";") else self.expression()
        self.expect(";", " in the for header")
        update = None if self.at(")") else self.expression()
        self.expect(")", " to close the for header")
        if self.at(";"):
            self.take()
            return For(init, condition, update, Block((), tok.line, tok.column), tok.line, tok.column)
        return For(init, condition, update, self.trailer(), tok.line, tok.column)

    def is_declaration(self) -> bool:
        k = self.decl_type_length()
        return bool(k) and self.peek(k).kind == "id"

    def declaration(self) -> Declare:
        start = self.tok
        dtype = self.decltype()
        names: list[tuple[str, Expr | None, int, int]] = []
        while True:
            name = self.tok
            if name.kind != "id":
                raise self.error(f"expected a variable name, found {self.found()}")
            self.take()
            value = None
            if self.at("="):
                self.take()
                value = self.expression()
            names.append((name.text, value, name.line, name.column))
            if not self.at(","):
                break
            self.take()
        return Declare(dtype, tuple(names), start.line, start.column)

    def dstatement(self) -> Statement:
        tok = self.tok
        if tok.kind == "keyword":
            if tok.text == "do":
                self.take()
                body = self.block()
                self.expect("while", " after the do block")
                self.expect("(")
                condition = self.expression()
                self.expect(")")
                return While(condition, body, True, tok.line, tok.column)
            if tok.text in ("continue", "break"):
                self.take()
                return Jump(tok.text, tok.line, tok.column)
            if tok.text == "return":
                self.take()
                if self.at(";") or self.at("}") or self.tok.kind == "eof":
                    return Return(None, tok.line, tok.column)
                return Return(self.expression(), tok.line, tok.column)
            if tok.text == "throw":
                self.take()
                return Throw(self.expression(), tok.line, tok.column)
            if tok.text == "else":
                raise self.error("'else' without an 'if'")
        if self.is_declaration():
            return self.declaration()
        return ExprStatement(self.expression(), tok.line, tok.column)

    # ------------------------------------------------------------ expressions

    def expression(self) -> Expr:
        self.nest()
        left = self.elvis()
        if self.tok.kind == "op" and self.tok.text in _ASSIGN_OPS:
            op = self.take()
            if not isinstance(left, (Variable, Field, Index)):
                raise self.error(f"the left side of '{op.text}' is not a variable, field or element", op)
            left = Assign(left, op.text, self.expression(), op.line, op.column)
        self.depth -= 1
        return left

    def elvis(self) -> Expr:
        left = self.conditional()
        if self.at("?:"):
            op = self.take()
            return Elvis(left, self.elvis(), op.line, op.column)
        return left

    def conditional(self) -> Expr:
        condition = self.binary(0)
        if self.at("?"):
            op = self.take()
            then = self.expression()
            self.expect(":", " in the ternary ?:")
            return Conditional(condition, then, self.conditional_tail(), op.line, op.column)
        return condition

    def conditional_tail(self) -> Expr:
        self.nest()
        value = self.conditional()
        self.depth -= 1
        return value

    def binary(self, level: int) -> Expr:
        if level == len(_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while True:
            tok = self.tok
            if level == _INSTANCEOF_LEVEL and tok.kind == "keyword" and tok.text == "instanceof":
                self.take()
                left = InstanceOf(left, self.decltype(), tok.line, tok.column)
            elif tok.kind == "op" and tok.text in _LEVELS[level]:
                self.take()
                left = Binary(tok.text, left, self.binary(level + 1), tok.line, tok.column)
            elif tok.kind == "op" and tok.text in ("=~", "==~"):
                raise self.unsupported(_REFUSED_OPS[tok.text])
            else:
                return left

    def unary(self) -> Expr:
        tok = self.tok
        if tok.kind == "op":
            if tok.text in ("++", "--"):
                self.take()
                target = self.chain()
                self.check_target(target, tok)
                return Increment(target, 1 if tok.text == "++" else -1, True, tok.line, tok.column)
            if tok.text in ("!", "~", "+", "-"):
                self.take()
                self.nest()
                operand = self.unary()
                self.depth -= 1
                return Unary(tok.text, operand, tok.line, tok.column)
            if tok.text == "(" and self.is_cast():
                self.take()
                ctype = self.decltype()
                self.expect(")")
                self.nest()
                operand = self.unary()
                self.depth -= 1
                return Cast(ctype, operand, tok.line, tok.column)
        value = self.chain()
        if self.tok.kind == "op" and self.tok.text in ("++", "--"):
            op = self.take()
            self.check_target(value, op)
            return Increment(value, 1 if op.text == "++" else -1, False, op.line, op.column)
        return value

    def check_target(self, target: Expr, op: Token) -> None:
        if not isinstance(target, (Variable, Field, Index)):
            raise self.error(f"'{op.text}' needs a variable, field or element", op)

    def is_cast(self) -> bool:
        k = 1
        if self.peek(k).kind != "type":
            return False
        k += 1
        while self.peek(k).text == "[" and self.peek(k + 1).text == "]":
            k += 2
        return self.peek(k).text == ")"

    def chain(self) -> Expr:
        tok = self.tok
        if tok.kind == "type":
            if self.peek().text == "::":
                raise self.unsupported("method reference", self.peek())
            if self.peek().text not in (".", "?."):
                raise self.error(f"type {tok.text} used where a value is expected")
            self.take()
            dot = self.take()
            name = self.tok
            if name.kind == "dotint":
                raise self.error("a number after a type name", name)
            self.take()
            if self.at("("):
                target: Expr = StaticCall(tok.text, name.text, self.arguments(), dot.line, dot.column)
            else:
                target = StaticField(tok.text, name.text, dot.line, dot.column)
            return self.postfixes(target)
        if tok.kind == "keyword" and tok.text == "new":
            return self.postfixes(self.new())
        return self.postfixes(self.primary())

    def new(self) -> Expr:
        tok = self.take()
        type_tok = self.tok
        if type_tok.kind != "type":
            if type_tok.kind == "id":
                raise self.unsupported(f"class {type_tok.text} is not available to scripts", type_tok)
            raise self.error(f"expected a class name after new, found {self.found()}")
        self.take()
        if self.at("("):
            return NewObject(type_tok.text, self.arguments(), tok.line, tok.column)
        if not self.at("["):
            raise self.error(f"expected '(' or '[' after new {type_tok.text}, found {self.found()}")
        if self.peek().text == "]":
            dims = 0
            while self.at("[") and self.peek().text == "]":
                self.take()
                self.take()
                dims += 1
            self.expect("{", " to list the array's elements")
            items: list[Expr] = []
            if not self.at("}"):
                items.append(self.expression())
                while self.at(","):
                    self.take()
                    items.append(self.expression())
            self.expect("}", " to close the array's elements")
            return NewArray(TypeName(type_tok.text, dims), (), tuple(items), tok.line, tok.column)
        sizes: list[Expr] = []
        while self.at("["):
            self.take()
            sizes.append(self.expression())
            self.expect("]")
        return NewArray(TypeName(type_tok.text, len(sizes)), tuple(sizes), None, tok.line, tok.column)

    def arguments(self) -> tuple[Expr, ...]:
        self.expect("(")
        args: list[Expr] = []
        if not self.at(")"):
            args.append(self.expression())
            while self.at(","):
                self.take()
                args.append(self.expression())
        if self.tok.kind == "op" and self.tok.text in _REFUSED_OPS:
            raise self.unsupported(_REFUSED_OPS[self.tok.text])
        self.expect(")", " to close the argument list")
        return tuple(args)

    def primary(self) -> Expr:
        tok = self.tok
        kind = tok.kind
        if kind == "op" and tok.text == "(":
            self.take()
            value = self.expression()
            self.expect(")")
            return value
        if kind == "int":
            self.take()
            return Literal(self.integer(tok), tok.line, tok.column)
        if kind == "decimal":
            self.take()
            return Literal(_decimal(tok.text), tok.line, tok.column)
        if kind == "string":
            self.take()
            return Literal(tok.text, tok.line, tok.column)
        if kind == "keyword" and tok.text in ("true", "false", "null"):
            self.take()
            return Literal({"true": True, "false": False, "null": None}[tok.text], tok.line, tok.column)
        if kind == "op" and tok.text == "[":
            return self.collection()
        if kind == "id":
            self.take()
            if self.at("("):
                return LocalCall(tok.text, self.arguments(), tok.line, tok.column)
            if self.tok.kind == "op" and self.tok.text in _REFUSED_OPS:
                raise self.unsupported(_REFUSED_OPS[self.tok.text])
            return Variable(tok.text, tok.line, tok.column)
        if kind == "op" and tok.text == "/":
            raise self.unsupported("regex literal", tok)
        if kind == "keyword" and tok.text == "this":
            raise self.unsupported("this", tok)
        raise self.error(f"expected a value, found {self.found()}")

    def integer(self, tok: Token) -> object:
        text = tok.text
        is_long = text[-1] in "lL"
        digits = text[:-1] if is_long else text
        bits = 64 if is_long else 32
        pattern = True   # hex and octal constants are two's complement bit patterns
        if digits[:2].lower() == "0x":
            value = int(digits, 16)
        elif len(digits) > 1 and digits[0] == "0":
            if any(c in "89" for c in digits):
                raise self.error(f"malformed octal number {text!r}", tok)
            value = int(digits, 8)
        else:
            value, pattern = int(digits), False
        limit = 2 ** (bits - 1) - 1
        if value > (2 ** bits - 1 if pattern else limit):
            raise self.error(f"number {text} is out of range for {'long' if is_long else 'int'}", tok)
        if value > limit:
            value -= 2 ** bits
        return JLong(value) if is_long else value

    def collection(self) -> Expr:
        start = self.take()
        if self.at("]"):
            self.take()
            return ListInit((), start.line, start.column)
        if self.at(":") and self.peek().text == "]":
            self.take()
            self.take()
            return MapInit((), start.line, start.column)
        first = self.expression()
        if self.at(":"):
            self.take()
            entries = [(first, self.expression())]
            while self.at(","):
                self.take()
                key = self.expression()
                self.expect(":", " in the map literal")
                entries.append((key, self.expression()))
            self.expect("]", " to close the map literal")
            return MapInit(tuple(entries), start.line, start.column)
        items = [first]
        while self.at(","):
            self.take()
            items.append(self.expression())
        self.expect("]", " to close the list literal")
        return ListInit(tuple(items), start.line, start.column)

    def postfixes(self, target: Expr) -> Expr:
        while True:
            tok = self.tok
            if tok.kind != "op":
                return target
            if tok.text in (".", "?."):
                self.take()
                name = self.take()
                if name.kind not in ("dotid", "dotint"):
                    raise self.error("expected a field or method name after '.'", name)
                if name.kind == "dotid" and self.at("("):
                    target = Call(target, name.text, self.arguments(), tok.text == "?.", name.line, name.column)
                else:
                    target = Field(target, name.text, tok.text == "?.", name.line, name.column)
            elif tok.text == "[":
                self.take()
                index = self.expression()
                self.expect("]", " to close the index")
                target = Index(target, index, tok.line, tok.column)
            else:
                return target


def _decimal(text: str) -> object:
    if text[-1] in "fF":
        return JFloat.of(float(text[:-1]))
    return float(text.rstrip("dD"))
