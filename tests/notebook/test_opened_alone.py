"""The first code cell of every notebook: a lesson opened alone installs dpedu in Colab and Kaggle, and
anywhere else stops with one line saying what to run (CI's hosted-learner pass runs the install for real)."""

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dpedu
from dpedu.notebook import opened_alone
from dpedu.notebook.opened_alone import FIRST_CELL, INSTRUCTION, first_code_cell, rewrite

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
HOSTED = {"COLAB_RELEASE_TAG": "release-colab-x", "KAGGLE_KERNEL_RUN_TYPE": "Interactive"}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_notebook_opens_with_the_one_first_cell(notebook):
    cell = first_code_cell(json.loads(notebook.read_text()))
    assert "".join(cell["source"]) == FIRST_CELL, "run: python -m dpedu.notebook.opened_alone notebooks/*.ipynb"


def run_first_cell(monkeypatch, tmp_path, environ: dict[str, str]) -> list[list[str]]:
    """Run the cell where ``import dpedu`` fails, in an empty folder; return the pip commands it ran."""
    for name in (*HOSTED, "DPEDU_SOURCE", "PIP_FAILS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "dpedu", None)  # `import dpedu` raises ModuleNotFoundError
    installed = []

    def pip(command, **options):
        installed.append(command)
        if os.environ.get("PIP_FAILS"):
            return subprocess.CompletedProcess(command, 1, "", "Collecting mpich\nERROR: No matching distribution")
        sys.modules["dpedu"] = dpedu  # what a successful install gives the next import
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", pip)
    exec(FIRST_CELL, {})
    return installed


@pytest.mark.parametrize("environ", [{}, {"DPEDU_SOURCE": "dpedu.whl"}, {"COLAB_RELEASE_TAG": "x"}],
                         ids=["plain Jupyter", "a source but not hosted", "Colab without a source"])
def test_without_dpedu_the_cell_stops_with_one_line_saying_what_to_run(monkeypatch, tmp_path, environ):
    with pytest.raises(SystemExit) as stopped:
        run_first_cell(monkeypatch, tmp_path, environ)
    assert str(stopped.value) == INSTRUCTION and "\n" not in INSTRUCTION
    assert f"%pip install {opened_alone.WHEEL}" in INSTRUCTION and "./course wheel" in INSTRUCTION


@pytest.mark.parametrize("host", sorted(HOSTED))
def test_in_colab_and_kaggle_the_cell_installs_the_wheel_beside_the_notebook(monkeypatch, tmp_path, host):
    (tmp_path / "dpedu-0.0.9-py3-none-any.whl").write_bytes(b"")
    (tmp_path / opened_alone.WHEEL).write_bytes(b"")
    installed = run_first_cell(monkeypatch, tmp_path, {host: HOSTED[host]})
    assert installed == [[sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--root-user-action=ignore", opened_alone.WHEEL]]


def test_dpedu_source_comes_before_a_wheel_and_an_installed_dpedu_installs_nothing(monkeypatch, tmp_path):
    (tmp_path / opened_alone.WHEEL).write_bytes(b"")
    installed = run_first_cell(monkeypatch, tmp_path, {"KAGGLE_KERNEL_RUN_TYPE": "Batch", "DPEDU_SOURCE": "x.whl"})
    assert installed[0][-1] == "x.whl"
    monkeypatch.setitem(sys.modules, "dpedu", dpedu)
    exec(FIRST_CELL, {})  # dpedu importable: nothing runs (subprocess.run is still the recording fake)
    assert len(installed) == 1


@pytest.mark.parametrize("environ", [{"COLAB_RELEASE_TAG": "x"}, {}], ids=["Colab", "a hub"])
def test_an_environment_with_a_torch_older_than_the_course_supports_is_told_first(monkeypatch, tmp_path, environ):
    # everywhere: following the one-line instruction on a hub would replace that torch too
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.11.0+cu126")
    (tmp_path / opened_alone.WHEEL).write_bytes(b"")
    with pytest.raises(SystemExit, match=r"torch 2\.11\.0\+cu126 is older than the course's 2\.12, and installing"):
        run_first_cell(monkeypatch, tmp_path, environ)
    assert sys.modules["dpedu"] is None  # the fake pip never ran


def test_without_torch_the_cell_goes_on_to_install(monkeypatch, tmp_path):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    (tmp_path / opened_alone.WHEEL).write_bytes(b"")
    assert len(run_first_cell(monkeypatch, tmp_path, {"COLAB_RELEASE_TAG": "x"})) == 1


def test_a_failed_install_says_why_and_what_to_check_on_kaggle(monkeypatch, tmp_path):
    (tmp_path / opened_alone.WHEEL).write_bytes(b"")
    with pytest.raises(SystemExit) as stopped:
        run_first_cell(monkeypatch, tmp_path, {"KAGGLE_KERNEL_RUN_TYPE": "Interactive", "PIP_FAILS": "1"})
    assert "turn Internet on" in str(stopped.value) and "No matching distribution" in str(stopped.value)


def test_the_oldest_torch_is_the_same_in_the_cell_the_requirements_and_the_package():
    lowest = ".".join(map(str, opened_alone.TORCH_LOWEST))
    requirements = (ROOT / "requirements.txt").read_text().splitlines()
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"torch>={lowest}" in requirements and f"torch>={lowest}" in dependencies
    assert not [line for line in requirements + dependencies if line.startswith("torch") and "<" in line]  # no cap


def test_the_wheel_named_is_the_one_the_course_builds_and_the_published_place_is_named_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert opened_alone.VERSION == project["version"]
    published = project.get("urls", {}).get("Source")
    assert opened_alone.PUBLISHED_AT == published  # None: not published yet, and the README says so


def test_rewrite_inserts_the_cell_before_the_first_code_cell_once(tmp_path):
    path = tmp_path / "lesson.ipynb"
    path.write_text(json.dumps({"cells": [
        {"cell_type": "markdown", "id": "a", "metadata": {}, "source": ["# Title"]},
        {"cell_type": "code", "execution_count": None, "id": "b", "metadata": {}, "outputs": [],
         "source": ["import dpedu"]}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert rewrite(path) and not rewrite(path)
    cells = json.loads(path.read_text())["cells"]
    assert [c["cell_type"] for c in cells] == ["markdown", "code", "code"]
    assert "".join(cells[1]["source"]) == FIRST_CELL and cells[2]["source"] == ["import dpedu"]
