"""Lesson 10's "port already in use" cell: rank 0's store cannot listen where another program holds the port
on every address, and the cell's check fails where nothing holds it (a squatter that held one address alone
would not stop the store on macOS, whose BSD rules allow a wildcard listener beside a specific one; Linux
refuses both, so that mistake cannot be shown here). The cell's own source is run, as it stands in the lesson."""

import json
import re
import socket
from contextlib import ExitStack, suppress
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "10_when_things_go_wrong.ipynb"
SQUAT = 'taken = squatter.enter_context(socket.create_server(("", 0))).getsockname()[1]'
SQUAT_IPV6 = 'squatter.enter_context(socket.create_server(("::", taken), family=socket.AF_INET6))'


def port_cell() -> str:
    cells = json.loads(LESSON.read_text())["cells"]
    [source] = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and "another program holds" in
                "".join(c["source"])]
    assert source.count(SQUAT) == source.count(SQUAT_IPV6) == 1, "the cell holds its port otherwise: update this test"
    return source


def run(source: str) -> dict:
    namespace = {"socket": socket, "dist": dist, "re": re, "ExitStack": ExitStack, "suppress": suppress,
                 "timedelta": timedelta}
    exec(compile(source, "lesson 10, the port cell", "exec"), namespace)
    return namespace


def test_the_store_fails_where_the_port_is_held_on_every_address():
    message = run(port_cell())["message"]
    assert "EADDRINUSE" in message and "code:" not in message and "PORT" in message


def test_the_check_fails_where_nothing_holds_the_port():
    with socket.create_server(("", 0)) as probe:
        free = probe.getsockname()[1]
    source = port_cell().replace(SQUAT, f"taken = {free}").replace(SQUAT_IPV6, "pass")
    with pytest.raises(AssertionError, match="listened on a port another program holds"):
        run(source)
