import sys
import time

import pytest

from dpedu.commands import run_together


def test_outputs_come_back_in_the_order_of_the_commands():
    a, b = run_together([[sys.executable, "-c", "import time; time.sleep(0.3); print('first')"],
                         [sys.executable, "-c", "import sys; print('second'); sys.exit(3)"]], timeout=30)
    assert (a.stdout, a.returncode) == ("first\n", 0)
    assert (b.stdout, b.returncode) == ("second\n", 3)


def test_a_command_still_running_at_the_timeout_is_stopped_with_its_children(tmp_path):
    pidfile = tmp_path / "pid"
    script = ("import subprocess, time; p = subprocess.Popen(['sleep', '60']); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="timeout=1"):
        run_together([[sys.executable, "-c", script]], timeout=1)
    assert time.monotonic() - start < 6
    grandchild = int(pidfile.read_text())
    state = open(f"/proc/{grandchild}/stat").read().split(")")[1].split()[0] if _exists(grandchild) else "gone"
    assert state in ("gone", "Z")


def _exists(pid):
    try:
        open(f"/proc/{pid}/stat").close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize(("commands", "timeout"), [([], 1), (["echo hi"], 1), ([["echo"]], 0)])
def test_bad_arguments_are_refused(commands, timeout):
    with pytest.raises(ValueError):
        run_together(commands, timeout=timeout)
