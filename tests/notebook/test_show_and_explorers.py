"""dpedu.notebook: explorers, progress bars, and show_source with its file, lines and folded checks."""

import ast
import inspect
import json
import textwrap
from pathlib import Path

import pytest

from dpedu.data_parallel import mini_ddp
from dpedu.notebook import explore, progress, show_source, widgets_enabled
from dpedu.notebook.course import lesson_id
from dpedu.notebook.show import _is_check, _is_docstring, fold_checks, source_with_location
from dpedu.sgd import staleness

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_explore_draws_the_first_choice_when_widgets_are_off(monkeypatch):
    monkeypatch.setenv("DPEDU_STATIC", "1")
    assert not widgets_enabled()
    calls = []
    explore(lambda batch, lr: calls.append((batch, lr)), batch=(8, 16), lr=[0.1, 0.2])
    assert calls == [(8, 0.1)]


@pytest.mark.parametrize("values", [(), "abc", 5])
def test_explore_rejects_options_that_are_not_choices(values):
    with pytest.raises(ValueError, match="option 'lr'"):
        explore(lambda lr: None, lr=values)


def test_show_source_shows_the_code_itself_headed_by_its_file_and_lines():
    shown = show_source(explore).data
    lines, first = inspect.getsourcelines(explore)
    assert shown.splitlines()[0] == f"# dpedu/notebook/explorers.py, lines {first}–{first + len(lines) - 1}"
    assert "def explore" in shown


def test_a_block_of_opening_checks_is_folded_into_one_line_that_says_where_it_is():
    shown = show_source(staleness.delayed_gd).data
    lines, first = inspect.getsourcelines(staleness.delayed_gd)
    body = ast.parse("".join(lines)).body[0].body
    checks = body[1:[i for i, s in enumerate(body) if i > 0 and not _is_check(s)][0]]
    start, end = first + checks[0].lineno - 1, first + checks[-1].end_lineno - 1
    assert f"    ...  # argument checks, folded (lines {start}–{end})" in shown.splitlines()
    assert "raise ValueError" not in shown.split("argument checks, folded")[0]
    assert "iterates = [x0.clone()]" in shown  # the code after the checks is shown as it is


def test_folding_keeps_everything_that_is_not_an_opening_check():
    source = (
        "def f(x, n):\n"
        '    """Doc."""\n'
        "    whole('n', n)\n"
        "    if x is None:\n"
        "        raise ValueError('x')\n"
        "    self_value = whole('n', n)\n"  # binds a new name: not a pure check, so it stays
        "    if n > 3:\n"
        "        raise ValueError('late')\n"  # a check after the first other statement stays too
        "    return x\n"
        "\n"
        "def g(x):\n"
        "    real('x', x)\n")  # all checks: nothing left to read past, shown as it is
    folded = fold_checks(source, first_line=10)
    assert folded.splitlines()[2] == "    ...  # argument checks, folded (lines 12–14)"
    assert folded.splitlines()[3:] == source.splitlines()[5:]


def test_a_check_of_anything_but_an_argument_is_labelled_a_check_and_lookalikes_stay():
    source = (
        "def f(x):\n"
        "    if not dist.is_initialized():\n"  # tests the process group, not an argument
        "        raise RuntimeError('no group')\n"
        "    real('x', x)\n"
        "    return x\n"
        "\n"
        "def g(x):\n"
        "    if (n := len(x)) == 0:\n"  # binds n, which the code after it uses: shown
        "        raise ValueError('x')\n"
        "    return n\n"
        "\n"
        "def h(x):\n"
        "    rng.real('x', x)\n"  # some object's method named like a check: shown
        "    return x\n")
    folded = fold_checks(source).splitlines()
    assert folded[1] == "    ...  # checks, folded (lines 2–4)"
    assert folded[2:] == source.splitlines()[4:]


def test_methods_of_a_shown_class_are_folded_too():
    shown = show_source(mini_ddp.MiniDDP).data
    init = shown[shown.index("def __init__"):]
    # among its argument checks, one asks whether there is a process group: so they are just "checks"
    assert init.splitlines()[1].strip().startswith("...  # checks, folded")


def _course_imports(tree: ast.Module) -> str:
    """The cell's imports of dpedu (the course's scripts included: ``dpedu.scripts``), one per line."""
    def ours(name: str) -> bool:
        return name.startswith("dpedu")
    return "\n".join(ast.unparse(node) for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and ours(node.module or "")
                     or isinstance(node, ast.Import) and any(ours(alias.name) for alias in node.names))


def _shown_expressions(tree: ast.Module):
    """Each ``show_source(...)`` argument in the cell; one shown in a loop over a tuple gives each item."""
    loops = {id(call.args[0]): loop.iter.elts for loop in ast.walk(tree)
             if isinstance(loop, ast.For) and isinstance(loop.iter, (ast.Tuple, ast.List))
             for call in ast.walk(loop) if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "show_source"
             and isinstance(call.args[0], ast.Name) and call.args[0].id == getattr(loop.target, "id", None)}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "show_source":
            yield from (ast.unparse(item) for item in loops.get(id(call.args[0]), [call.args[0]]))


def _shown_objects():
    """Every object a notebook passes to ``show_source``, evaluated with the notebook's imports, with the text its
    cell stored."""
    for notebook in sorted(NOTEBOOKS.glob("*.ipynb")):
        cells = [cell for cell in json.loads(notebook.read_text())["cells"] if cell["cell_type"] == "code"]
        trees = [ast.parse("\n".join("" if line.lstrip().startswith(("%", "!")) else line  # magics
                                     for line in "".join(cell["source"]).splitlines()))
                 for cell in cells]
        namespace: dict = {}
        exec("\n".join(_course_imports(tree) for tree in trees), namespace)
        for tree, cell in zip(trees, cells, strict=True):
            stored = "".join("".join(output.get("data", {}).get("text/plain", "")) for output in cell["outputs"])
            for expression in _shown_expressions(tree):
                yield f"{lesson_id(notebook)}: {expression}", eval(expression, namespace), stored


def test_every_shown_object_is_found_in_loops_and_in_the_course_scripts():
    shown = [where for where, _, _ in _shown_objects()]
    assert "12a: model_parallel.megatron_mlp" in shown  # shown in a loop over a tuple
    assert "13a: train_addition.train" in shown  # a course script (dpedu.scripts)


def test_every_shown_source_a_lesson_stored_is_the_source_as_it_is_now():
    """An edit of dpedu that changes or moves the lines a lesson shows leaves that lesson's stored output stale,
    which otherwise only running the lesson (nbval, the browser test) finds: execute that lesson again."""
    stale = [where for where, obj, stored in _shown_objects() if source_with_location(obj).rstrip("\n") not in stored]
    assert not stale, f"stored show_source outputs that no longer match dpedu's source: {stale}"


def _guard_like(statement: ast.stmt, module_globals: dict) -> bool:
    """Judged independently of show.py's rules: an ``if`` that raises, or a call whose result is thrown
    away to a function that can raise (its only use here is to raise)."""
    if isinstance(statement, ast.If):
        return any(isinstance(s, ast.Raise) for s in statement.body)
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        callee = statement.value.func
        function = module_globals.get(callee.id) if isinstance(callee, ast.Name) else None
        return inspect.isfunction(function) and "raise " in inspect.getsource(function)
    return False


def test_no_function_a_lesson_shows_opens_with_argument_checks():
    opening_with_checks = []
    for where, obj, _ in _shown_objects():
        lines, first = inspect.getsourcelines(obj)
        module_globals = vars(inspect.getmodule(obj))
        for node in ast.walk(ast.parse(fold_checks(textwrap.dedent("".join(lines)), first))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = [s for s in node.body if not _is_docstring(s)
                        and not (isinstance(s, ast.Expr) and getattr(s.value, "value", None) is Ellipsis)]
                if body and _guard_like(body[0], module_globals):
                    opening_with_checks.append(f"{where}: {node.name}")
    assert not opening_with_checks


def test_progress_is_quiet_under_the_tests_and_yields_everything(monkeypatch, capsys):
    monkeypatch.setenv("DPEDU_QUIET", "1")
    assert list(progress(range(5), "counting")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="description"):
        progress(range(3), 7)


def test_explore_and_show_source_name_bad_arguments():
    with pytest.raises(TypeError, match="draw"):
        explore(None, lr=(0.1,))
    with pytest.raises(ValueError, match="at least one option"):
        explore(lambda: None)
    with pytest.raises(TypeError, match="obj"):
        show_source(3)


def test_progress_refuses_what_cannot_be_looped_over():
    with pytest.raises(TypeError, match="iterable"):
        progress(5)
