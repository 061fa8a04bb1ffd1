"""`./course` runs under macOS's own /bin/bash, which is bash 3.2, and as a user who is not root.

macOS ships bash 3.2 as /bin/bash (later versions are GPLv3), and `#!/usr/bin/env bash` finds it on a Mac
without Homebrew's bash, whatever the login shell (zsh included). CI runs bash 5 on Linux, as root, and
cannot see what 3.2 refuses: the launcher once ran under `set -u` and expanded `"${root[@]}"`, an empty
array for anyone but root, and bash before 4.4 stopped with "root[@]: unbound variable" before JupyterLab
opened. So the script's text is checked for what bash 3.2 refuses or mishandles (arrays at all, and what
came with bash 4), and that check is shown to catch the original script. The behavioural tests run the
script with each bash found here (/bin/bash, the one on PATH, and DPEDU_TEST_BASH if set, e.g. a bash 3.2
built from source), against a stand-in venv whose python and jupyter only record how they were called,
so nothing is installed; and, where this runs as root and setpriv exists, as the user nobody.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from dpedu.notebook import opened_alone

ROOT = Path(__file__).resolve().parent.parent
COURSE = ROOT / "course"
BEFORE_THE_FIX = "fc68e96e97f625131e974fa6202072990a0d8f27"  # HEAD when the bash 3.2 failure was reported

# (pattern, what it is): each needs bash 4 or later, or is an array (which bash 3.2 under `set -u` cannot
# expand when empty). Comments are removed before matching, so the script may name them.
NOT_IN_BASH_3_2 = [
    (r"\$\{[#!]?[A-Za-z_]\w*\[", "an array expansion, ${name[@]} or ${name[i]}"),
    (r"(?<![\w$])[A-Za-z_]\w*\+?=\(", "an array assignment, name=( or name+=("),
    (r"(?<![\w$])[A-Za-z_]\w*\[[^\]]*\]\+?=", "an array element assignment, name[i]="),
    (r"\b(declare|typeset|local|readonly|export)\s+-\w*[aAn]", "declare -a/-A/-n (arrays, namerefs)"),
    (r"\bread\s+(-\w+\s+)*-\w*a", "read -a (an array)"),
    (r"\b(mapfile|readarray|coproc)\b", "mapfile, readarray or coproc (bash 4)"),
    (r"\$\{[A-Za-z_]\w*(,|\^)", "case modification ${var,,} ${var^^} (bash 4)"),
    (r"\$\{[A-Za-z_]\w*@[QEPAaKkUuL]\}", "a ${var@Q} transformation (bash 4.4)"),
    (r"\$\{![A-Za-z_]\w*[@*]\}", "${!prefix@} (names by prefix)"),
    (r"\|&", "|& (bash 4)"),
    (r"&>>", "&>> (bash 4)"),
    (r";;?&", ";& or ;;& case fall-through (bash 4)"),
    (r"(\[\[?|\btest)\s+-v\s", "[[ -v name ]] (bash 4.2)"),
    (r"\bwait\s+-n\b", "wait -n (bash 4.3)"),
    (r"\b(globstar|lastpipe|autocd|compat\d+)\b", "a bash 4 shopt"),
    (r"(?<!\$)\{[A-Za-z_]\w*\}[<>]", "{fd}> redirection (bash 4.1)"),
    (r"\bEPOCH(SECONDS|REALTIME)\b|\bBASH_ARGV0\b", "a bash 5 variable"),
]


def bash_3_2_problems(script: str) -> list[str]:
    """Each line of `script` that uses something bash 3.2 refuses or mishandles, with what it is."""
    problems = []
    for number, line in enumerate(script.splitlines(), 1):
        code = re.sub(r"(^|\s)#.*", "", line)  # a comment, not $# or ${#x}
        problems += [f"line {number}: {what}: {line.strip()}"
                     for pattern, what in NOT_IN_BASH_3_2 if re.search(pattern, code)]
    return problems


def test_the_script_uses_nothing_bash_3_2_lacks():
    assert bash_3_2_problems(COURSE.read_text()) == []


def test_the_check_catches_the_original_failure():
    original = 'root=(); [ "$(id -u)" = 0 ] && root=(--allow-root)\n' \
               'exec "$venv/bin/jupyter" lab notebooks/ "${root[@]}" "${@:2}" ;;\n'
    found = bash_3_2_problems(original)
    assert any("array assignment" in problem for problem in found)
    assert any("array expansion" in problem and "line 2" in problem for problem in found)
    assert bash_3_2_problems('echo "$# args: $*" "${@:2}" "${#name}"  # ${name[@]}; x=$(date)') == []
    for bash_4 in ("declare -A seen", "mapfile -t lines < f", 'echo "${v,,}"', "cmd |& tee log",
                   "cmd &>> log", "a) x ;;&", "b) y ;&", "[[ -v HOME ]]", "coproc cat", 'echo "${x[-1]}"',
                   'echo "${!DPEDU_@}"', "local -a list"):
        assert bash_3_2_problems(bash_4), bash_4


def test_the_check_catches_the_script_before_the_fix():
    if not shutil.which("git") or not (ROOT / ".git").exists():
        pytest.skip("no git checkout to read the script before the fix from")
    before = subprocess.run(["git", "show", f"{BEFORE_THE_FIX}:course"], cwd=ROOT, capture_output=True, text=True)
    if before.returncode:
        pytest.skip(f"commit {BEFORE_THE_FIX[:7]} is not in this clone: {before.stderr.strip()}")
    assert any('"${root[@]}"' in problem for problem in bash_3_2_problems(before.stdout))


def bashes() -> list[str]:
    """The bashes here, each once: DPEDU_TEST_BASH if set, /bin/bash (3.2 on a Mac), the one on PATH."""
    found = [os.environ.get("DPEDU_TEST_BASH"), "/bin/bash", shutil.which("bash")]
    return list(dict.fromkeys(os.path.realpath(path) for path in found if path and os.access(path, os.X_OK)))


def bash_version(bash: str) -> str:
    return subprocess.run([bash, "-c", "echo $BASH_VERSION"], capture_output=True, text=True).stdout.strip()


each_bash = pytest.mark.parametrize("bash", bashes(), ids=bash_version)

STUB = """#!/bin/sh
# A stand-in for the venv's {name}: it records each call, one tab-separated line, and pip answers.
(IFS='\t'; echo "{name}\t$*") >> "$(dirname "$0")/../calls"
[ "$1 $2 $3" = "-m pip --version" ] && echo "pip 0 (stand-in)"
exit 0
"""


@pytest.fixture
def venv():
    """A stand-in venv that anyone may use, nobody included: bin/python, bin/jupyter and a log of calls."""
    folder = Path(tempfile.mkdtemp(prefix="dpedu-course-test-"))
    (folder / "bin").mkdir()
    for name in ("python", "jupyter"):
        (folder / "bin" / name).write_text(STUB.format(name=name))
        (folder / "bin" / name).chmod(0o755)
    (folder / "calls").touch()
    for path in (folder, folder / "calls"):
        path.chmod(path.stat().st_mode | stat.S_IRWXO | stat.S_IRWXG)
    yield folder
    shutil.rmtree(folder)


def calls(venv: Path) -> list[list[str]]:
    """What the stand-ins were asked, pip's health check left out, and the log emptied."""
    lines = (venv / "calls").read_text().splitlines()
    (venv / "calls").write_text("")
    return [line.split("\t") for line in lines if line != "python\t-m\tpip\t--version"]


def course(bash: str, venv: Path, *args: str, user: list[str] | None = None, first_on_path: Path | None = None,
           **env: str):
    """./course args, run by `bash` with nothing from this environment but PATH (env -i), as `user` if given;
    commands in `first_on_path` stand in for the system's."""
    path = f"{str(first_on_path) + ':' if first_on_path else ''}{Path(bash).parent}:/usr/bin:/bin"
    env.setdefault("DPEDU_WORK", str(venv / "work"))  # the learner's copies: never the repository's my-notebooks/
    command = [*(user or []), "env", "-i", f"PATH={path}", f"DPEDU_VENV={venv}",
               *(f"{name}={value}" for name, value in env.items()), bash, str(COURSE), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@each_bash
def test_it_parses(bash):
    run = subprocess.run([bash, "-n", str(COURSE)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@each_bash
@pytest.mark.parametrize("args", [(), ("nonsense",)])
def test_without_a_known_command_it_prints_its_usage_and_exits_2(bash, venv, args):
    run = course(bash, venv, *args)
    assert run.returncode == 2 and run.stderr.startswith("usage: ./course lab"), run.stderr
    assert calls(venv) == []


def stand_in(folder: Path, name: str, script: str) -> Path:
    """An executable ``name`` in ``folder`` that runs ``script`` (sh), standing in for the system's."""
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(f"#!/bin/sh\n{script}\n")
    (folder / name).chmod(0o755)
    return folder


# What the stand-in python fails (the first call whose arguments hold the word) and with what code: 2 is pytest's
# for an interrupted run
FAILING = {"units": ("loadfile", 3), "beside": ("--part=beside", 3), "alone": ("--part=alone", 3), "all": ("pytest", 3),
           "units interrupted": ("loadfile", 2), "lessons interrupted": ("--part=beside", 2)}


@each_bash
@pytest.mark.parametrize("fails", [None, *FAILING])
def test_test_alone_runs_the_unit_tests_then_the_lessons_two_at_a_time_then_those_with_timing_claims(bash, venv, fails,
                                                                                                     tmp_path):
    (venv / "lib" / "python3.99" / "site-packages" / "torch").mkdir(parents=True)
    if fails:  # the stand-in python fails a pytest run, after recording the call
        word, code = FAILING[fails]
        stub = (venv / "bin" / "python").read_text().replace(
            "exit 0", f'case " $* " in *" {word} "*) exit {code} ;; esac\nexit 0')
        (venv / "bin" / "python").write_text(stub)
    run = course(bash, venv, "test", first_on_path=stand_in(tmp_path / "bin", "nproc", "echo 2"))
    assert run.returncode == (FAILING[fails][1] if fails else 0), run.stderr
    units = ["python", "-m", "pytest", "-n", "2", "--dist", "loadfile", "--ignore=tests/test_browser.py", "tests"]
    lessons = ["python", "-m", "pytest", "-n", "2", "--dist", "worksteal", "tests/test_browser.py", "notebooks",
               "--part=beside"]
    alone = ["python", "-m", "pytest", "tests/test_browser.py", "notebooks", "--part=alone"]
    # each part runs even after the one before failed, not after Ctrl-C stopped it, which the script says
    stopped = {"units interrupted": [units], "lessons interrupted": [units, lessons]}
    assert calls(venv)[1:] == stopped.get(fails, [units, lessons, alone])
    said = {"units interrupted": "The unit tests were interrupted: the notebooks did not run.",
            "lessons interrupted": "The lessons were interrupted: the rest of the notebooks did not run."}
    assert [fail for fail, message in said.items() if message in run.stderr] == ([fails] if fails in said else [])


@pytest.mark.parametrize(("nproc", "getconf", "workers"), [
    ("echo 16", "echo 16", "4"),  # more buys little: at most 4
    ("echo 3", "echo 16", "3"),  # nproc counts what this process may use (a container's CPUs)
    ("echo 1", "echo 16", "0"),  # one CPU: no workers, the tests in pytest's own process
    ("exit 127", "echo 2", "2"),  # no nproc (macOS): getconf
    ("exit 127", "exit 1", "0"),  # neither answers: one CPU assumed
])
def test_the_unit_tests_get_a_worker_per_usable_cpu_up_to_4_the_lessons_two(venv, nproc, getconf, workers, tmp_path):
    (venv / "lib" / "python3.99" / "site-packages" / "torch").mkdir(parents=True)
    stand_in(tmp_path / "bin", "nproc", nproc)
    run = course(bashes()[0], venv, "test", first_on_path=stand_in(tmp_path / "bin", "getconf", getconf))
    assert run.returncode == 0, run.stderr
    unit_tests, lessons = calls(venv)[1:3]
    assert unit_tests[3:5] == ["-n", workers]
    assert lessons[3:5] == ["-n", "0" if workers == "0" else "2"]  # two lessons at a time where there are 2 cores


@each_bash
def test_lab_installs_requirements_once_and_test_adds_the_test_tools(bash, venv):
    as_root = ["--allow-root"] if os.geteuid() == 0 else []
    install = ["python", "-m", "pip", "install", "--disable-pip-version-check", "-r"]

    first = course(bash, venv, "lab", "--port", "9999")
    assert first.returncode == 0, first.stderr
    assert "Installing requirements.txt" in first.stderr and " GB" in first.stderr  # no torch in it: its size
    assert calls(venv) == [[*install, "requirements.txt", "-e", "."],
                           ["jupyter", "lab", f"{venv}/work/", *as_root, "--port", "9999"]]
    assert course(bash, venv, "lab").returncode == 0
    assert calls(venv) == [["jupyter", "lab", f"{venv}/work/", *as_root]]

    (venv / "lib" / "python3.99" / "site-packages" / "torch").mkdir(parents=True)
    more = course(bash, venv, "test", "-x", "tests/")
    assert more.returncode == 0 and " GB" not in more.stderr, more.stderr  # torch is there: no size to warn of
    assert calls(venv) == [[*install, "requirements-test.txt", "-e", "."], ["python", "-m", "pytest", "-x", "tests/"]]
    assert course(bash, venv, "check-gpu", "--help").returncode == 0
    assert calls(venv) == [["python", "-m", "dpedu.gpu_check", "--help"]]
    assert course(bash, venv, "lab").returncode == 0
    assert calls(venv) == [["jupyter", "lab", f"{venv}/work/", *as_root]]


@each_bash
def test_kernel_registers_the_venv_for_this_user_or_where_told(bash, venv):
    register = ["python", "-m", "ipykernel", "install", "--name", "dpedu", "--display-name", "Python (dpedu course)"]
    run = course(bash, venv, "kernel")
    assert run.returncode == 0, run.stderr
    assert calls(venv)[-1] == [*register, "--user"]
    assert "Python (dpedu course)" in run.stdout and f"in {venv}/work/," in run.stdout
    # your own Jupyter opens your own copies, as ./course lab does, so that an update never touches your runs
    copies, lessons = ({p.name for p in folder.glob("*.ipynb")} for folder in (venv / "work", ROOT / "notebooks"))
    assert copies == lessons
    shutil.rmtree(venv / "work")
    run = course(bash, venv, "kernel", "--prefix", "/opt/hub")
    assert run.returncode == 0 and "./course copy DIR" in run.stdout
    assert calls(venv) == [[*register, "--prefix", "/opt/hub"]]  # installed already, and no --user
    assert not (venv / "work").exists()  # a hub's kernel is every learner's: their copies come from ./course copy


@each_bash
def test_handout_writes_handout_html_or_the_file_named(bash, venv):
    assert course(bash, venv, "handout").returncode == 0
    assert calls(venv)[-1] == ["python", "-m", "dpedu.notebook.handout", "handout.html"]
    assert course(bash, venv, "handout", "class.html").returncode == 0
    assert calls(venv) == [["python", "-m", "dpedu.notebook.handout", "class.html"]]


@each_bash
def test_wheel_builds_the_package_alone_and_installs_nothing(bash, venv):
    run = course(bash, venv, "wheel")
    assert run.returncode == 0, run.stderr
    build = ["python", "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "-w", "dist", "."]
    assert calls(venv) == [build]
    assert f"pip install dist/{opened_alone.WHEEL}" in run.stdout


@each_bash
def test_a_venv_without_pip_is_reported_with_its_repair(bash, venv):
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    run = course(bash, venv, "lab")
    assert run.returncode == 1 and "rm -rf" in run.stderr and "python3-venv" in run.stderr, run.stderr
    assert "lab" not in (venv / "calls").read_text()


@each_bash
def test_a_python_whose_venv_cannot_make_one_gets_the_debian_hint(bash, venv, tmp_path):
    python = tmp_path / "python3"
    python.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 0\necho "ensurepip is not available" >&2\nexit 1\n')
    python.chmod(0o755)
    run = course(bash, tmp_path / "no-venv-yet", "lab", PYTHON=str(python))
    assert run.returncode == 1 and "apt install python3-venv" in run.stderr, run.stderr


@each_bash
def test_lab_as_a_user_who_is_not_root(bash, venv):
    """The path that failed: as anyone but root, lab passes no --allow-root (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("not root: the other tests already run ./course as a user who is not root")
    if not shutil.which("setpriv"):
        pytest.skip("no setpriv to become the user nobody")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if subprocess.run([*nobody, bash, "-c", f"test -r {COURSE} -a -x {ROOT}"]).returncode:
        pytest.skip(f"the user nobody cannot read {COURSE}")
    run = course(bash, venv, "lab", "--no-browser", user=nobody)
    assert run.returncode == 0, run.stderr
    assert calls(venv)[-1] == ["jupyter", "lab", f"{venv}/work/", "--no-browser"]


def a_mac(folder: Path, machine: str, version: str = "3.12", apple_silicon: bool = True) -> Path:
    """Stand-ins for a Mac's uname and sysctl, and for a Python of that `machine` and `version`, in `folder`."""
    older = "1" if tuple(map(int, version.split("."))) < (3, 10) else "0"
    stand_ins = {
        "uname": 'echo Darwin',
        "sysctl": f'[ "$*" = "-n hw.optional.arm64" ] && echo {int(apple_silicon)}',
        "python3": f'case "$*" in *version_info*) exit {older} ;; *platform.machine*) echo {machine}; exit 0 ;; esac\n'
                   'echo "made a venv: $*" >&2; exit 1',
    }
    for name, body in stand_ins.items():
        stand_in(folder, name, body)
    return folder


@each_bash
@pytest.mark.parametrize(("apple_silicon", "cure"), [(True, "arm64 Python"), (False, "Linux container")])
def test_a_mac_with_an_intel_python_is_stopped_before_anything_is_installed(bash, tmp_path, apple_silicon, cure):
    mac = a_mac(tmp_path, "x86_64", apple_silicon=apple_silicon)
    run = course(bash, tmp_path / "no-venv-yet", "lab", first_on_path=mac, PYTHON="python3")
    assert run.returncode == 1 and cure in run.stderr and "2.2.2" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "made a venv" not in run.stderr
    assert not (tmp_path / "no-venv-yet").exists()


@each_bash
def test_a_mac_with_macos_own_python_3_9_is_told_to_install_a_newer_one(bash, tmp_path):
    run = course(bash, tmp_path / "no-venv-yet", "test", first_on_path=a_mac(tmp_path, "arm64", "3.9"),
                 PYTHON="python3")
    assert run.returncode == 1 and "3.9" in run.stderr and "PYTHON=python3.X ./course test" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "made a venv" not in run.stderr


@each_bash
def test_a_python_that_is_not_there_is_named_as_missing_not_as_too_old(bash, tmp_path):
    run = course(bash, tmp_path / "no-venv-yet", "lab", first_on_path=a_mac(tmp_path, "arm64"), PYTHON="python3.99")
    assert run.returncode == 1 and "There is no python3.99 here" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@each_bash
def test_an_arm64_python_on_a_mac_goes_on_to_make_the_venv(bash, tmp_path):
    """The check lets Apple silicon's own Python through (the stand-in then fails making the venv, as it should)."""
    run = course(bash, tmp_path / "no-venv-yet", "lab", first_on_path=a_mac(tmp_path, "arm64"), PYTHON="python3")
    assert "made a venv: -m venv" in run.stderr, run.stderr


def notebook(text: str, first_cell: str = "# The course's helper package, dpedu 0.2.0 or later") -> str:
    return json.dumps({"cells": [
        {"cell_type": "code", "execution_count": None, "id": "f", "metadata": {}, "outputs": [],
         "source": [first_cell]},
        {"cell_type": "markdown", "id": "a", "metadata": {}, "source": [text]}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


@each_bash
def test_update_day_keeps_the_learners_runs_and_brings_the_new_lessons(bash, venv, tmp_path):
    """A learner runs lessons, the course changes (a lesson edited, one added), the learner pulls: the pull
    succeeds, every notebook opens, the runs are kept, the new lesson is there, the changed one is named, and
    `reset` gives a fresh copy with the run moved to old/ (the stash-and-pull of before wrote conflict markers
    into the run notebook, which JupyterLab then could not open)."""
    if not shutil.which("git"):
        pytest.skip("no git")
    git = ["git", "-c", "user.name=course", "-c", "user.email=course@example.org", "-c", "pull.rebase=false"]
    upstream, clone = tmp_path / "upstream", tmp_path / "clone"
    (upstream / "notebooks").mkdir(parents=True)
    for name in ("course", "requirements.txt", "requirements-test.txt", "pyproject.toml", ".gitignore"):
        shutil.copy2(ROOT / name, upstream / name)
    (upstream / "notebooks" / "00_welcome.ipynb").write_text(notebook("welcome"))
    (upstream / "notebooks" / "03_ddp.ipynb").write_text(notebook("DDP"))
    (upstream / "notebooks" / "05_inside.ipynb").write_text(notebook("inside DDP"))
    subprocess.run([*git, "init", "-q", "-b", "main", str(upstream)], check=True)
    subprocess.run([*git, "-C", str(upstream), "add", "."], check=True)
    subprocess.run([*git, "-C", str(upstream), "commit", "-q", "-m", "the course"], check=True)
    subprocess.run([*git, "clone", "-q", str(upstream), str(clone)], check=True)

    def course_here(*args, **env):
        return subprocess.run(["env", "-i", f"PATH={Path(bash).parent}:/usr/bin:/bin", f"DPEDU_VENV={venv}",
                               *(f"{name}={value}" for name, value in env.items()), bash, str(clone / "course"),
                               *args], capture_output=True, text=True, timeout=60)

    first = course_here("lab")
    mine = clone / "my-notebooks"
    assert first.returncode == 0 and f"{mine.name}/: git leaves them alone" in first.stderr, first.stderr
    assert calls(venv)[-1][:3] == ["jupyter", "lab", "my-notebooks/"]
    (mine / "03_ddp.ipynb").write_text(notebook("DDP, run by the learner"))  # what saving a run does

    (upstream / "notebooks" / "00_welcome.ipynb").write_text(notebook("welcome", "# The course's helper, 0.3.0"))
    (upstream / "notebooks" / "03_ddp.ipynb").write_text(notebook("DDP, corrected"))
    (upstream / "notebooks" / "04_collectives.ipynb").write_text(notebook("collectives"))
    (upstream / "notebooks" / "05_inside.ipynb").unlink()  # a lesson too long for one sitting, split in two
    (upstream / "notebooks" / "05a_buckets.ipynb").write_text(notebook("buckets"))
    (upstream / "notebooks" / "05b_hooks.ipynb").write_text(notebook("hooks"))
    subprocess.run([*git, "-C", str(upstream), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(upstream), "commit", "-q", "-m", "update day"], check=True)
    pulled = subprocess.run([*git, "-C", str(clone), "pull", "-q"], capture_output=True, text=True)
    assert pulled.returncode == 0, pulled.stderr

    after = course_here("lab")
    assert after.returncode == 0, after.stderr
    assert "New lessons copied into my-notebooks/: 04 05a 05b" in after.stderr
    assert "No longer in the course: 05. CHANGELOG.md (\"Lesson numbers\") says where each went; your copy stays in " \
           "my-notebooks/." in after.stderr
    assert (mine / "05_inside.ipynb").read_text() == notebook("inside DDP")  # the learner's, wherever it went
    assert "Changed in the course since you copied them: 03. ./course reset NN" in after.stderr  # 00's first cell
    for path in [*mine.glob("*.ipynb"), *(clone / "notebooks").glob("*.ipynb")]:
        json.loads(path.read_text())  # every notebook opens
    assert (mine / "03_ddp.ipynb").read_text() == notebook("DDP, run by the learner")
    assert (mine / "04_collectives.ipynb").read_text() == notebook("collectives")

    reset = course_here("reset", "3", "03")  # twice within a second: the learner's run is still kept
    assert reset.returncode == 0, reset.stderr
    assert (mine / "03_ddp.ipynb").read_text() == notebook("DDP, corrected")
    kept = sorted(path.read_text() for path in (mine / "old").glob("03_ddp.*.ipynb"))
    assert kept == sorted([notebook("DDP, run by the learner"), notebook("DDP, corrected")])
    assert "Changed in the course" not in course_here("copy").stderr
    unknown = course_here("reset", "7")
    assert unknown.returncode == 2 and "the lessons are 00 03 04 05a 05b" in unknown.stderr
    assert course_here("reset", "5b").returncode == 0  # a sitting by its short name, as 3 is 03
    assert (mine / "05b_hooks.ipynb").read_text() == notebook("hooks")
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""  # the runs are invisible to git: the next pull cannot conflict with them

    by_hand = tmp_path / "copied by hand"  # as `cp -r notebooks ...` made them: no record of the course's version
    shutil.copytree(clone / "notebooks", by_hand)
    told = course_here("copy", str(by_hand))
    assert told.returncode == 0 and "Changed" not in told.stderr and "New lessons" not in told.stderr, told.stderr
    assert course_here("reset", "04").returncode == 0  # in my-notebooks: DPEDU_WORK names another folder
    hub = course_here("copy", str(tmp_path / "home dpedu"))
    assert f'DPEDU_WORK="{tmp_path / "home dpedu"}" {clone / "course"} reset NN' in hub.stderr, hub.stderr
    refused = course_here("reset", "03", DPEDU_WORK=clone / "notebooks")
    assert refused.returncode == 2 and "the course's own notebooks/" in refused.stderr
