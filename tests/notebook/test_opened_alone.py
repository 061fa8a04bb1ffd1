"""The first code cell of every notebook: a lesson opened alone installs dpedu in Colab and Kaggle, and
anywhere else stops with one line saying what to run; a kernel with an older dpedu, or another kernel than the
course's, is told what to do (CI's hosted-learner pass runs the install for real)."""

import importlib.metadata
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import jupyter_core.paths
import pytest

import dpedu
from dpedu.notebook import opened_alone
from dpedu.notebook.opened_alone import FIRST_CELL, INSTRUCTION, NO_WHEEL, OTHER_KERNEL, first_code_cell, rewrite

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
HOSTED = {"COLAB_RELEASE_TAG": "release-colab-x", "KAGGLE_KERNEL_RUN_TYPE": "Interactive"}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_notebook_opens_with_the_one_first_cell(notebook):
    cell = first_code_cell(json.loads(notebook.read_text()))
    assert "".join(cell["source"]) == FIRST_CELL, "run: python -m dpedu.notebook.opened_alone notebooks/*.ipynb"


def run_first_cell(monkeypatch, tmp_path, environ: dict[str, str], kernels: list[Path] | None = None
                   ) -> list[list[str]]:
    """Run the cell where ``import dpedu`` fails, in an empty folder, with Jupyter's kernel specs looked for in
    ``kernels`` only (none by default); return the pip commands it ran."""
    for name in (*HOSTED, "DPEDU_SOURCE", "PIP_FAILS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jupyter_core.paths, "jupyter_path", lambda *subdirs: [str(path) for path in kernels or []])
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


@pytest.mark.parametrize(("environ", "told"), [({}, INSTRUCTION), ({"DPEDU_SOURCE": "dpedu.whl"}, INSTRUCTION),
                                              ({"COLAB_RELEASE_TAG": "x"}, NO_WHEEL["Colab"]),
                                              ({"KAGGLE_KERNEL_RUN_TYPE": "Batch"}, NO_WHEEL["Kaggle"])],
                         ids=["plain Jupyter", "a source but not hosted", "Colab without a source",
                              "Kaggle without a source"])
def test_without_dpedu_the_cell_stops_with_one_line_saying_what_to_run(monkeypatch, tmp_path, environ, told):
    with pytest.raises(SystemExit) as stopped:
        run_first_cell(monkeypatch, tmp_path, environ)
    assert str(stopped.value) == told and "\n" not in told
    assert opened_alone.WHEEL in told and "./course wheel" in told
    assert ("/content" in told and "Drive" in told) if "COLAB_RELEASE_TAG" in environ else "/content" not in told
    assert ("/kaggle/input" in told and "Internet on" in told) if "KAGGLE_KERNEL_RUN_TYPE" in environ else True


def test_a_kernel_without_dpedu_beside_the_course_kernel_is_told_to_switch(monkeypatch, tmp_path):
    spec = tmp_path / "share" / "kernels"
    (spec / "dpedu").mkdir(parents=True)
    (spec / "dpedu" / "kernel.json").write_text("{}")
    with pytest.raises(SystemExit) as stopped:
        run_first_cell(monkeypatch, tmp_path, {}, kernels=[tmp_path / "nothing", spec])
    assert str(stopped.value) == OTHER_KERNEL and "Change Kernel" in OTHER_KERNEL
    (tmp_path / opened_alone.WHEEL).write_bytes(b"")  # hosted, the cell installs: Colab has no such kernel
    assert len(run_first_cell(monkeypatch, tmp_path, {"COLAB_RELEASE_TAG": "x"}, kernels=[spec])) == 1


def installed_dpedu(version: str | None) -> types.ModuleType:
    """A stand-in for an installed dpedu of that version (None: the first, 0.1.0, which had no __version__)."""
    module = types.ModuleType("dpedu")
    module.__file__ = "/site-packages/dpedu/__init__.py"
    if version:
        module.__version__ = version
    return module


@pytest.mark.parametrize("installed", ["0.1.0", None, "0.1.99", "0.1.9.dev0", "0.1", "0.2.0"])
def test_an_older_dpedu_is_told_to_reinstall_and_restart(monkeypatch, installed):
    monkeypatch.setitem(sys.modules, "dpedu", installed_dpedu(installed))
    with pytest.raises(SystemExit) as stopped:
        exec(FIRST_CELL, {})
    said = str(stopped.value)
    assert f"this kernel has {installed or '0.1.0'}. If the course was updated" in said
    assert f"%pip install {opened_alone.WHEEL}" in said and "restart the kernel" in said and "\n" not in said


@pytest.mark.parametrize("installed",
                         [dpedu.__version__, "0.10.0", "9.0.0", "0.3.0.dev1", f"{dpedu.__version__}+local", "1.0"])
def test_this_dpedu_or_a_newer_one_goes_on(monkeypatch, installed):
    monkeypatch.setitem(sys.modules, "dpedu", installed_dpedu(installed))
    exec(FIRST_CELL, {})


def test_a_folder_named_dpedu_in_place_of_the_package_is_named(monkeypatch):
    folder = types.ModuleType("dpedu")  # what `import dpedu` gives for a folder without __init__.py: no __file__
    folder.__path__ = ["/home/learner/dpedu"]
    monkeypatch.setitem(sys.modules, "dpedu", folder)
    with pytest.raises(SystemExit, match="found only the folder /home/learner/dpedu, which is not the course's"):
        exec(FIRST_CELL, {})


def test_the_newest_wheel_is_installed_by_version_not_by_name(monkeypatch, tmp_path):
    for version in ("0.9.0", "0.10.0", "0.2.0"):  # by name, 0.9.0 would be last
        (tmp_path / f"dpedu-{version}-py3-none-any.whl").write_bytes(b"")
    for odd in ("dpedu-latest.whl", "dpedu-0.11.0.whl", "dpedu-0.12.0.dev1-py3-none-any.whl"):  # not pip's names
        (tmp_path / odd).write_bytes(b"")
    assert run_first_cell(monkeypatch, tmp_path, {"COLAB_RELEASE_TAG": "x"})[0][-1] == "dpedu-0.10.0-py3-none-any.whl"


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


@pytest.mark.parametrize(("environ", "told"), [
    ({"COLAB_RELEASE_TAG": "x"}, r"2\.12: run `%pip install 'torch>=2\.12'` in a cell, restart \(Colab: Runtime"),
    ({"KAGGLE_KERNEL_RUN_TYPE": "x"}, r"2\.12: run .*Kaggle: Run, Restart & clear cell outputs\), then run this"),
    ({}, r"2\.12, and installing dpedu would replace it: use an environment with a newer torch")],
    ids=["Colab", "Kaggle", "a hub"])
def test_an_environment_with_a_torch_older_than_the_course_supports_is_told_first(monkeypatch, tmp_path, environ,
                                                                                  told):
    # everywhere: following the one-line instruction on a hub would replace that torch too; hosted, the learner
    # can upgrade it and restart
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.11.0+cu126")
    (tmp_path / opened_alone.WHEEL).write_bytes(b"")
    with pytest.raises(SystemExit, match=r"torch 2\.11\.0\+cu126 is older than the course's " + told):
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
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert project["dynamic"] == ["version"] and pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "dpedu.__version__"}
    assert opened_alone.WHEEL == f"dpedu-{dpedu.__version__}-py3-none-any.whl"
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


def test_rewrite_updates_an_older_version_of_the_cell_in_place(tmp_path):
    path = tmp_path / "lesson.ipynb"
    older = "# The course's helper package. In a clone, `./course lab` installs it.\ntry:\n    import dpedu\n"
    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "execution_count": 1, "id": "kept", "metadata": {"tags": ["x"]}, "outputs": [],
         "source": [older]}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert rewrite(path)
    [cell] = json.loads(path.read_text())["cells"]
    assert cell["id"] == "kept" and cell["metadata"] == {"tags": ["x"]} and "".join(cell["source"]) == FIRST_CELL
