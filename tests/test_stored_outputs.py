"""The browser test's output comparison follows nbval's rules: what must differ is caught, what may is not; and
no compared output can differ on a GPU machine."""

import json
import re
from pathlib import Path

import nbformat
from nbformat.v4.rwbase import rejoin_lines
from stored_outputs import comparable, differences, ignored, sanitize_patterns

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def code(source: str, outputs: list[dict], tags: tuple[str, ...] = ()) -> dict:
    return {"cell_type": "code", "source": [source], "metadata": {"tags": list(tags)}, "outputs": outputs}


def stdout(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": [text]}


def display(data: dict) -> dict:
    return {"output_type": "display_data", "data": data, "metadata": {}}


def notebook(*cells: dict) -> dict:
    return {"cells": list(cells)}


def test_a_changed_print_or_result_is_a_difference_and_says_where():
    stored = notebook(code("print(41)", [stdout("41\n")]), code("x", [display({"text/plain": "1"})]))
    executed = notebook(code("print(41)", [stdout("42\n")]), code("x", [display({"text/plain": "2"})]))
    found = differences(stored, executed)
    assert len(found) == 2
    assert found[0].startswith("cell 0, stdout: stored ['41\\n']") and "gave ['42\\n']" in found[0]
    assert found[1].startswith("cell 1, text/plain: stored ['1']")


def test_streams_are_joined_and_sanitized_patterns_do_not_count():
    stored = notebook(code("", [stdout("listening on 127.0.0.1:4000\n"), stdout("done\n")]))
    executed = notebook(code("", [stdout("listening on 127.0.0.1:5123\ndone\n")]))
    assert differences(stored, executed) == []
    outputs = rejoin_lines(nbformat.from_dict(executed)).cells[0].outputs
    assert "127.0.0.1:PORT" in comparable(outputs, sanitize_patterns())["stdout"][0]


def test_ignored_cells_figures_and_widgets_are_not_compared():
    stored = notebook(code("# NBVAL_IGNORE_OUTPUT\nprint(t)", [stdout("0.12 s\n")]),
                      code("print(t)", [stdout("0.12 s\n")], tags=("nbval-ignore-output",)),
                      code("plt.show()", [display({"image/png": "AAA", "text/plain": "<Figure size 640x480>"})]),
                      code("explore(draw)", [display({"image/png": "AAA", "text/plain": "<Figure>"})]))
    executed = notebook(code("# NBVAL_IGNORE_OUTPUT\nprint(t)", [stdout("0.34 s\n")]),
                        code("print(t)", [stdout("0.34 s\n")], tags=("nbval-ignore-output",)),
                        code("plt.show()", [display({"image/png": "BBB", "text/plain": "<Figure size 640x480>"})]),
                        code("explore(draw)", [display({"application/vnd.jupyter.widget-view+json": {"model_id": "x"},
                                                        "text/plain": "interactive(...)"})]))
    assert differences(stored, executed) == []


def test_an_error_where_none_was_stored_is_a_difference():
    error = {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}
    found = differences(notebook(code("f()", [])), notebook(code("f()", [error])))
    assert found == ["cell 0, error: stored None\n    but this run gave ['ValueError: bad']"]


# What a cell's code may branch on to print something else on a GPU machine (comments left out)
BRANCHES_ON_GPUS = re.compile(r"gpu_count\(|cuda\.is_available|device_count\(|[\"']cuda|torch\.cuda")


def prints_what_depends_on_gpus(cell: dict) -> bool:
    """A code cell whose code asks about GPUs and whose stored output nbval would compare: on a GPU machine
    it may print other text, and the GPU self-check's notebooks would fail there."""
    source = "".join(cell["source"])
    code = "\n".join(line.split("#")[0] for line in source.splitlines())
    compared = not (ignored(cell) or "NBVAL_SKIP" in source)
    shown = any(o.get("output_type") in ("stream", "execute_result") for o in cell.get("outputs", []))
    return cell["cell_type"] == "code" and compared and shown and bool(BRANCHES_ON_GPUS.search(code))


def test_no_compared_cell_prints_what_depends_on_the_gpus():
    """A cell that branches on GPUs and prints is marked # NBVAL_IGNORE_OUTPUT (and still asserts its claim),
    or prints nothing that depends on them: device names and GPU-only lines go to a marked cell."""
    found = [f"{path.name}, cell {i}" for path in sorted(NOTEBOOKS.glob("*.ipynb"))
             for i, cell in enumerate(json.loads(path.read_text())["cells"]) if prints_what_depends_on_gpus(cell)]
    assert not found, f"compared cells whose output depends on the GPUs: {found}"


def test_the_gpu_output_rule_sees_a_marked_and_an_unmarked_cell():
    branch = "print('on', 'cuda' if torch.cuda.is_available() else 'cpu')"
    assert prints_what_depends_on_gpus(code(branch, [stdout("on cpu\n")]))
    assert not prints_what_depends_on_gpus(code("# NBVAL_IGNORE_OUTPUT\n" + branch, [stdout("on cpu\n")]))
    assert not prints_what_depends_on_gpus(code("print(1)  # not on torch.cuda", [stdout("1\n")]))
    assert not prints_what_depends_on_gpus(code(branch, []))
