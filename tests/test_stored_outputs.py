"""The browser test's output comparison follows nbval's rules: what must differ is caught, what may is not."""

import nbformat
from nbformat.v4.rwbase import rejoin_lines
from stored_outputs import comparable, differences, sanitize_patterns


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
