import sys
import tempfile
import time
from pathlib import Path

import pytest
from processes import gone_within

from dpedu.runtime import commands
from dpedu.runtime.commands import run_together


def test_outputs_come_back_in_the_order_of_the_commands():
    a, b = run_together([[sys.executable, "-c", "import time; time.sleep(0.3); print('first')"],
                         [sys.executable, "-c", "import sys; print('second'); sys.exit(3)"]], timeout=30)
    assert (a.stdout, a.returncode) == ("first\n", 0)
    assert (b.stdout, b.returncode) == ("second\n", 3)


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_a_command_still_running_at_the_timeout_is_stopped_with_its_children(tmp_path):
    pidfile = tmp_path / "pid"
    script = ("import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="timeout=1"):
        run_together([[sys.executable, "-c", script]], timeout=1)
    assert time.monotonic() - start < 1 + 10  # a hang check, not a speed test
    assert gone_within(int(pidfile.read_text()))


def test_a_command_held_back_starts_only_after_the_text_it_waits_for_is_printed():
    first = ("import time; time.sleep(0.5); print('before', time.time(), flush=True); time.sleep(0.5); "
             "print('ready', time.time(), flush=True); time.sleep(1)")
    a, b = run_together([[sys.executable, "-c", first], [sys.executable, "-c", "import time; print(time.time())"]],
                        timeout=30, start_when=[None, "ready"])
    ready_at = float(a.stdout.split()[3])
    assert float(b.stdout) >= ready_at and (a.returncode, b.returncode) == (0, 0)


def test_a_command_whose_text_never_comes_is_named_and_the_others_are_stopped():
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="never started.*waiting for 'ready'"):
        run_together([[sys.executable, "-c", "import time; time.sleep(60)"], [sys.executable, "-c", "pass"]],
                     timeout=1, start_when=[None, "ready"])
    assert time.monotonic() - start < 1 + 10  # a hang check, not a speed test


def test_a_command_whose_text_can_no_longer_come_fails_at_once():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="waited for 'ready', which the commands before it never printed"):
        run_together([[sys.executable, "-c", "print('something else')"], [sys.executable, "-c", "pass"]],
                     timeout=60, start_when=[None, "ready"])
    assert time.monotonic() - start < 30  # not the 60 s timeout


@pytest.mark.parametrize("start_when", [[None], [None, ""], [None, 3]])
def test_a_bad_start_when_is_refused_by_name(start_when):
    with pytest.raises(ValueError, match="start_when"):
        run_together([["echo"], ["echo"]], timeout=1, start_when=start_when)


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_what_a_command_started_in_a_session_of_its_own_is_stopped_too(tmp_path):
    # as torchrun starts its workers: out of reach of signals to the command's group
    pidfile = tmp_path / "pid"
    script = ("import subprocess, time; p = subprocess.Popen(['sleep', '60'], start_new_session=True); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    with pytest.raises(TimeoutError, match="timeout=1"):
        run_together([[sys.executable, "-c", script]], timeout=1)
    assert gone_within(int(pidfile.read_text()))


@pytest.mark.parametrize(("commands", "timeout"), [([], 1), (["echo hi"], 1), ([["echo"]], 0)])
def test_bad_arguments_are_refused(commands, timeout):
    with pytest.raises(ValueError, match="commands must be|timeout must be"):
        run_together(commands, timeout=timeout)


def test_works_where_python_has_no_waitid(monkeypatch):
    monkeypatch.delattr("os.waitid", raising=False)  # macOS before Python 3.13
    (run,) = run_together([[sys.executable, "-c", "print('done')"]], timeout=30)
    assert (run.stdout, run.returncode) == ("done\n", 0)


def _program(folder, name="mpiexec"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_a_program_pip_put_in_the_user_scripts_folder_is_found_off_path(monkeypatch, tmp_path):
    # pip install --user puts mpiexec in ~/.local/bin, which a hosted notebook's PATH often lacks
    user_bin = _program(tmp_path / "user" / "bin")
    monkeypatch.setattr(commands.sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setattr(commands.sysconfig, "get_path",
                        lambda name, scheme=None: str(tmp_path / ("user" if scheme else "base") / "bin"))
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    assert commands.installed_program("mpiexec") == user_bin
    beside = _program(tmp_path / "venv" / "bin")  # a virtual environment's own comes first
    assert commands.installed_program("mpiexec") == beside


def test_a_missing_program_says_where_it_looked_and_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(commands.sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setattr(commands.sysconfig, "get_path", lambda name, scheme=None: str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match=r"mpiexec is not installed for .* pip install mpich mpi4py"):
        commands.installed_program("mpiexec")
    with pytest.raises(ValueError, match="name must be a program's name"):
        commands.installed_program("bin/mpiexec")


def test_what_the_commands_leave_in_their_temporary_folder_goes_with_them(tmp_path, monkeypatch):
    """Without it, every torchrun run would leave a torchelastic_* folder in the temporary folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                "-m", "json.tool", "--help"]
    [run] = run_together([torchrun], timeout=60)
    assert run.returncode == 0, run.stderr
    assert list(tmp_path.iterdir()) == []
