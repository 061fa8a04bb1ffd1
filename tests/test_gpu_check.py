"""dpedu.gpu_check on a machine without GPUs: its no-GPU path for real, its machinery with faked checks.

The checks themselves need GPUs; what can be shown here is that a run reports every check on its line,
goes on after a failure, exits non-zero on one, records what passed, and reads torch's words right.
"""

import subprocess
import sys

import pytest

from dpedu import gpu_check
from dpedu.failures import RankFailedError


def test_without_a_gpu_it_says_so_and_exits_0():
    if gpu_check.gpu_count():
        pytest.skip("this machine has GPUs: ./course check-gpu runs the checks for real")
    run = subprocess.run([sys.executable, "-m", "dpedu.gpu_check", "--no-notebooks"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "No GPU here" in run.stdout and "torch.distributed backends" in run.stdout


def passes():
    return "measured 1.0e-07 (tolerance 1e-4)"


def fails():
    gpu_check.expect(False, "measured 3.0e-02 (tolerance 1e-4)\nthe details")


def crashes():
    raise RuntimeError("CUDA error: out of memory")


def test_one_line_per_check_a_failure_does_not_stop_the_next(capsys):
    outcomes = gpu_check.run_checks([("first", passes), ("second", fails), ("third", crashes), ("fourth", passes)])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines if not line.startswith(" ")] == [
        ["PASS", "first"], ["FAIL", "second"], ["FAIL", "third"], ["PASS", "fourth"]]
    assert lines[0].endswith("s)") and "measured 1.0e-07 (tolerance 1e-4)" in lines[0]
    assert "      the details" in lines  # a failure's further lines, indented under it
    assert outcomes["third"] == (False, "RuntimeError: CUDA error: out of memory")


def test_the_exit_code_says_whether_a_check_failed(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "gpu_count", lambda: 1)  # a GPU machine, as far as the checks are told
    monkeypatch.setattr(gpu_check, "CHECKS", [("first", passes), ("notebooks", fails)])
    assert gpu_check.main([]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 1 failed: notebooks"
    assert gpu_check.main(["--no-notebooks"]) == 0


def test_what_passed_is_recorded_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "gpu_count", lambda: 0)  # no device names to read here
    path = tmp_path / "gpu_recorded.json"
    assert gpu_check.recorded("fsdp2", path) is None
    gpu_check.record({"fsdp2": (True, "within 2.0e-07"), "float16-gradscaler": (False, "off by 0.5")}, path)
    entry = gpu_check.recorded("fsdp2", path)
    assert entry["text"] == "within 2.0e-07" and entry["torch"] and entry["date"]
    assert gpu_check.recorded("float16-gradscaler", path) is None  # only what passed


def test_train_ddp_result_is_read_from_rank_0s_line():
    line = ("2 rank(s) on cpu:gloo,cuda:nccl, 10 steps of 2 x 32 examples: parameter checksum -0.83063, "
            "test accuracy 0.443, replicas identical: True\n")
    assert gpu_check.train_ddp_result(line) == (-0.83063, True)
    with pytest.raises(gpu_check.CheckFailed, match="printed no result"):
        gpu_check.train_ddp_result("Traceback ...")


def test_the_forked_control_recognises_torchs_refusal_only():
    refusal = RankFailedError(0, "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA "
                                 "with multiprocessing, you must use the 'spawn' start method")
    assert gpu_check.is_forked_cuda_error(refusal)
    assert not gpu_check.is_forked_cuda_error(RankFailedError(0, "RuntimeError: CUDA error: invalid device"))
    assert not gpu_check.is_forked_cuda_error(RuntimeError(gpu_check.FORKED_CUDA))  # not from a rank
