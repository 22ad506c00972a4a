"""LEIR, the loop-expression IR the dataset is written in: AST, parser, printer, checker,
analyses, canonical renaming, a NumPy interpreter and the Step-TP v1 reader/writer."""

from . import ast
from .ast import Program
from .parser import LeirSyntaxError, parse
from .printer import format_expr, format_program, format_stmt

__all__ = ["ast", "Program", "LeirSyntaxError", "parse", "format_program", "format_expr",
           "format_stmt"]

from .check import LeirCheckError, check
from .canon import canonical_hash, canonical_text, canonicalize
from .interp import run as interpret

__all__ += ["check", "LeirCheckError", "canonicalize", "canonical_hash", "canonical_text",
            "interpret"]
