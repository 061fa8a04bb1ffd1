"""``show_source``: the code a lesson relies on, shown in the lesson, headed by the file and lines it is from.

A function that checks its arguments opens with those checks, and a learner should not have to read past
them to reach the idea. So a block of checks at the start of a function (``if ...: raise``, or a call to
one of ``dpedu._validate``'s checks or a ``_check_...`` helper, by its bare name) is folded into one
comment that says where the checks are: "argument checks" when each of them reads an argument, "checks"
when one tests something else (is a process group there?). Nothing else is changed: what is shown is the
code that runs.

Used in lessons 01–14.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from typing import Any

CHECKS = {"whole", "real", "tensor", "training_problem"}  # dpedu._validate's checks
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds dpedu/


def show_source(obj: Any):
    """Display the source of a dpedu function, class or module, with its file and lines, checks folded."""
    from IPython.display import Code

    if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismethod(obj) or inspect.ismodule(obj)):
        raise TypeError(f"obj must be a function, class, method or module, got {type(obj).__name__}")
    return Code(source_with_location(obj), language="python")


def source_with_location(obj: Any) -> str:
    """``obj``'s source headed by ``# FILE, lines A–B``, each function's opening argument checks folded."""
    lines, first = inspect.getsourcelines(obj)
    first = max(first, 1)  # a module's source starts at line 0
    last = first + len(lines) - 1
    return f"# {_where(obj)}, lines {first}–{last}\n" + fold_checks(textwrap.dedent("".join(lines)), first)


def fold_checks(source: str, first_line: int = 1) -> str:
    """``source`` with the leading block of argument checks of every function in it replaced by one comment.

    ``first_line`` is the line of ``source``'s first line in its file, so that the comment can say where
    the folded checks are.
    """
    lines = source.splitlines(keepends=True)
    blocks = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if _is_docstring(node.body[0]) else node.body
            checks = []
            for statement in body:
                if not _is_check(statement):
                    break
                checks.append(statement)
            if checks and len(checks) < len(body):  # a function that is all checks is shown as it is
                arguments = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
                what = "argument checks" if all(_names(c) & arguments for c in checks) else "checks"
                blocks.append((checks[0].lineno, checks[-1].end_lineno, checks[0].col_offset, what))
    for start, end, column, what in sorted(blocks, reverse=True):
        where = f"line {start + first_line - 1}" if start == end else \
            f"lines {start + first_line - 1}–{end + first_line - 1}"
        lines[start - 1:end] = [" " * column + f"...  # {what}, folded ({where})\n"]
    return "".join(lines)


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def _names(statement: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}


def _is_check(statement: ast.stmt) -> bool:
    """An ``if`` that only raises, a call to a check (its result maybe given back to the name it checked),
    or a loop of checks; never one that binds a name with ``:=``, which the code after it could use."""
    if any(isinstance(n, ast.NamedExpr) for n in ast.walk(statement)):
        return False
    if isinstance(statement, ast.If):
        return not statement.orelse and isinstance(statement.body[-1], ast.Raise) and all(
            _is_check(s) or isinstance(s, ast.Raise) for s in statement.body)
    if isinstance(statement, ast.For):
        return not statement.orelse and all(_is_check(s) for s in statement.body)
    if isinstance(statement, (ast.Expr, ast.Assign)) and isinstance(statement.value, ast.Call):
        function = statement.value.func
        name = function.id if isinstance(function, ast.Name) else ""  # obj.real(...) may be anything
        checked = {a.id for a in ast.walk(statement.value) if isinstance(a, ast.Name)}
        rebinds_what_it_checked = isinstance(statement, ast.Expr) or all(
            isinstance(t, ast.Name) and t.id in checked for t in statement.targets)  # ``x = whole("x", x)``
        return (name in CHECKS or name.startswith("_check")) and rebinds_what_it_checked
    return False


def _where(obj: Any) -> str:
    """The file ``obj`` is defined in: dpedu's own code relative to the repository, anything else by its
    folder and name, wherever the course was copied to."""
    path = Path(inspect.getsourcefile(obj) or inspect.getfile(obj)).resolve()
    if path.is_relative_to(PACKAGE_ROOT):
        return path.relative_to(PACKAGE_ROOT).as_posix()
    return f"{path.parent.name}/{path.name}"
