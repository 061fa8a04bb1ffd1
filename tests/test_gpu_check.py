"""dpedu.gpu_check on a machine without GPUs: its no-GPU path for real, its machinery with faked checks.

The checks themselves need GPUs. What is shown here: a run reports every check on its line, goes on after
a failure, exits non-zero on one, records what passed; the pieces that read torch's and the script's words
read them right; and the checks that can run without a GPU (or with what torch reports faked) do.
"""

import contextlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from processes import gone_within

from dpedu import gpu_check, launch
from dpedu.runtime import start_methods
from dpedu.runtime.commands import Finished
from dpedu.runtime.environment import GPU, EnvironmentReport
from dpedu.runtime.failures import RankFailedError


def test_without_a_gpu_it_says_so_and_exits_0():
    if start_methods.gpu_count():
        pytest.skip("this machine has GPUs: ./course check-gpu runs the checks for real")
    run = subprocess.run([sys.executable, "-m", "dpedu.gpu_check"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "torch.distributed backends" in run.stdout  # the environment report
    assert "No GPU here" in run.stdout and "faking what torch reports" in run.stdout
    assert "PASS" not in run.stdout and "FAIL" not in run.stdout


def test_help_names_the_options(capsys):
    with pytest.raises(SystemExit) as stopped:
        gpu_check.main(["--help"])
    assert stopped.value.code == 0
    assert "--no-notebooks" in capsys.readouterr().out


def test_the_checks_run_in_the_documented_order():
    assert [name for name, _ in gpu_check.CHECKS] == [
        "environment", "cuda-after-parent-init", "nccl-all-reduce", "torchrun-train_ddp",
        "torchrun-train_addition", "ddp-on-gpus", "data-parallel", "sync-batchnorm", "fsdp2", "float16-gradscaler",
        "notebooks"]
    assert set(gpu_check.RECORDED) < {name for name, _ in gpu_check.CHECKS}


def passes():
    return "max |difference| 1.0e-07 (tolerance 1e-4)"


def fails():
    gpu_check.expect(False, "max |difference| 3.0e-02 (tolerance 1e-4)\nthe details")


def crashes():
    raise RuntimeError("CUDA error: out of memory")


def test_one_line_per_check_and_a_failure_does_not_stop_the_next(capsys):
    outcomes = gpu_check.run_checks([("first", passes), ("second", fails), ("third", crashes), ("fourth", passes)])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines if not line.startswith(" ")] == [
        ["PASS", "first"], ["FAIL", "second"], ["FAIL", "third"], ["PASS", "fourth"]]
    assert lines[0].startswith("PASS  first") and lines[0].endswith(" s)")
    assert "max |difference| 1.0e-07 (tolerance 1e-4)" in lines[0]
    assert lines[2] == "      the details"  # a failure's reason, indented under its line, then what to do
    assert lines[3].startswith("      what to do: the course pins full float32 wherever it compares GPU results")
    assert lines[6] == "      what to do: " + gpu_check.remedy("CUDA error: out of memory")
    assert gpu_check.remedy("CUDA error: out of memory").startswith("another program holds the GPUs' memory")
    assert outcomes["third"][0] is False and outcomes["third"][1].startswith("RuntimeError: CUDA error: out of memory")
    assert "in crashes" in outcomes["third"][1]  # where it was raised


def test_a_long_reason_shows_its_first_and_last_lines(capsys):
    def long():
        raise gpu_check.CheckFailed("\n".join(f"line {i}" for i in range(40)))

    gpu_check.run_checks([("long", long)])
    lines = capsys.readouterr().out.splitlines()
    assert [line.strip() for line in lines[1:-1]] == ["line 1", "line 2", "line 3", "line 4", "...",
                                                     *(f"line {i}" for i in range(30, 40))]
    assert lines[-1] == f"      what to do: {gpu_check.DEFAULT_REMEDY}"


def test_the_exit_code_says_whether_a_check_failed(fake_gpus, monkeypatch, capsys):
    fake_gpus(1)  # a GPU machine, as far as the checks are told
    monkeypatch.setattr(gpu_check, "CHECKS", [("first", passes), ("notebooks", fails)])
    assert gpu_check.main([]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "1 passed, 1 failed: notebooks" in lines
    assert lines[-1] == "  appendix_circulating_code: not run (--no-notebooks, or the checks stopped first)"
    assert gpu_check.main(["--no-notebooks"]) == 0
    assert "notebooks" not in [line.split()[1] for line in capsys.readouterr().out.splitlines()
                               if line.startswith(("PASS", "FAIL"))]  # skipped, not run


def fake_report(**changes) -> EnvironmentReport:
    fields = dict(python="3.11", torch=torch.__version__, system="Linux x86_64", cpu_cores=16,
                  gpus=(GPU(0, "Fake GPU", 80.0),), backends={"gloo": True, "nccl": True, "mpi": False},
                  start_method="forkserver", start_method_why="this machine has 1 GPU(s)")
    return EnvironmentReport(**{**fields, **changes})


def test_the_environment_check_reads_the_report(fake_gpus, monkeypatch, capsys):
    fake_gpus(1)
    monkeypatch.setattr(gpu_check, "environment_report", fake_report)
    assert gpu_check.check_environment() == "1 GPU(s) (Fake GPU), nccl available, ranks start by forkserver"
    assert "GPU 0: Fake GPU, 80.0 GiB" in capsys.readouterr().out  # the report is printed
    monkeypatch.setattr(gpu_check, "environment_report", lambda: fake_report(start_method="spawn"))
    assert gpu_check.check_environment().endswith("ranks start by spawn")  # DPEDU_START_METHOD=spawn is fine
    for changes, reason in [({"start_method": "fork"}, "start by fork"), ({"gpus": ()}, "lists 0 GPU"),
                            ({"backends": {"gloo": True, "nccl": False}}, "no nccl"),
                            ({"gpus": (GPU(0, "unusable by torch: driver too old", 0.0),)}, "cannot use")]:
        monkeypatch.setattr(gpu_check, "environment_report", lambda changes=changes: fake_report(**changes))
        with pytest.raises(gpu_check.CheckFailed, match=reason):
            gpu_check.check_environment()


def test_what_passed_is_recorded_merged_and_read_back(tmp_path):
    path = tmp_path / "gpu_recorded.json"
    assert gpu_check.recorded("fsdp2", path) is None  # no file yet
    gpu_check.record({"fsdp2": (True, "within 2.0e-07"), "float16-gradscaler": (False, "off by 0.5"),
                      "environment": (True, "1 GPU(s)")}, path, gpu="Fake GPU")
    entry = gpu_check.recorded("fsdp2", path)
    assert entry == {"gpu": "Fake GPU", "torch": torch.__version__, "date": entry["date"], "text": "within 2.0e-07"}
    assert gpu_check.recorded("float16-gradscaler", path) is None  # only what passed
    assert gpu_check.recorded("environment", path) is None  # only the GPU measurements a notebook can show
    gpu_check.record({"sync-batchnorm": (True, "gap 1e-07")}, path, gpu="2 x Other GPU")
    assert set(json.loads(path.read_text())) == {"fsdp2", "sync-batchnorm"}  # each entry says where it ran
    assert gpu_check.recorded("sync-batchnorm", path)["gpu"] == "2 x Other GPU"


def test_record_option_writes_the_file(fake_gpus, monkeypatch, tmp_path, capsys):
    fake_gpus(1)
    monkeypatch.setattr(gpu_check, "environment_report", fake_report)  # the GPU's name comes from the report
    monkeypatch.setattr(gpu_check, "RECORD", tmp_path / "gpu_recorded.json")
    monkeypatch.setattr(gpu_check, "CHECKS", [("fsdp2", passes), ("data-parallel", fails)])
    assert gpu_check.main(["--record"]) == 1
    assert gpu_check.recorded("fsdp2", tmp_path / "gpu_recorded.json")["gpu"] == "Fake GPU"
    assert gpu_check.recorded("data-parallel", tmp_path / "gpu_recorded.json") is None


def test_train_ddp_result_is_read_from_rank_0s_line():
    line = ("2 rank(s) on cpu:gloo,cuda:nccl, 10 steps of 2 x 32 examples: parameter checksum -0.83063, "
            "test accuracy 0.443, replicas identical: True\n")
    assert gpu_check.train_ddp_result("torchrun's notes\n" + line) == ("cpu:gloo,cuda:nccl", -0.83063, True)
    assert gpu_check.train_ddp_result(line.replace("True", "False").replace("cpu:gloo,cuda:nccl", "gloo"))[::2] == (
        "gloo", False)
    with pytest.raises(gpu_check.CheckFailed, match="printed no result"):
        gpu_check.train_ddp_result("Traceback ...")


def test_without_the_repository_the_notebook_check_fails_saying_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu_check, "ROOT", tmp_path)  # the scripts ship in dpedu; the notebooks need a clone
    gpu_check.run_checks([("notebooks", gpu_check.check_notebooks)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FAIL  notebooks") and "notebooks is not here" in lines[0]


def _forked_after_cuda() -> str:
    torch.cuda._is_in_bad_fork = lambda: True  # what torch reports in a child forked after cuInit
    return torch.cuda.get_device_name()


def test_the_forked_control_recognises_torchs_own_refusal():
    with pytest.raises(RankFailedError) as refused:  # torch's words, as this torch raises them in a rank
        launch(_forked_after_cuda, 1)
    assert gpu_check.is_forked_cuda_error(refused.value)
    assert not gpu_check.is_forked_cuda_error(RankFailedError(0, "RuntimeError: CUDA error: invalid device"))
    assert not gpu_check.is_forked_cuda_error(RuntimeError(gpu_check.FORKED_CUDA))  # not from a rank


def _sums_as_nccl_would(noisy: bool) -> tuple[int, float, float]:
    if noisy:
        print("NCCL WARN something", file=sys.stderr)
    return dist.get_rank(), 3.0, 3.0


@pytest.mark.parametrize("noisy", [False, True])
def test_what_ranks_print_on_stderr_is_a_note_under_a_pass_not_a_failure(fake_gpus, monkeypatch, capsys, noisy):
    fake_gpus(2)  # two gloo ranks stand in for the nccl ones
    monkeypatch.setattr(gpu_check, "launch", lambda fn, n, backend: launch(_sums_as_nccl_would, n, args=(noisy,)))
    outcomes = gpu_check.run_checks([("nccl-all-reduce", gpu_check.check_nccl_all_reduce)])
    lines = capsys.readouterr().out.splitlines()
    assert outcomes["nccl-all-reduce"][0] and "sums both 3" in lines[0]
    # (what else a rank may print on a loaded machine is a note too: only this warning is counted)
    notes = [line for line in lines if "[rank 0] NCCL WARN something" in line]
    assert len(notes) == noisy and all(line.startswith("      note: ranks printed on stderr: ") for line in notes)


def test_sync_batchnorm_on_fewer_than_2_gpus_is_not_checked_rather_than_passed_on_cpu_ranks(fake_gpus, capsys,
                                                                                            tmp_path):
    fake_gpus(1)
    outcomes = gpu_check.run_checks([("first", lambda: "fine"), ("sync-batchnorm", gpu_check.check_sync_batchnorm)])
    assert outcomes["sync-batchnorm"] == (None, "not checked here: needs 2 GPUs (nn.SyncBatchNorm over nccl, "
                                                "lesson 08a); this machine has 1")
    assert capsys.readouterr().out.splitlines()[1].startswith("SKIP  sync-batchnorm         not checked here")
    gpu_check.record(outcomes, tmp_path / "recorded.json", gpu="NVIDIA T4")
    assert not (tmp_path / "recorded.json").exists() or "sync-batchnorm" not in (tmp_path / "recorded.json").read_text()


def _running_with(text: str) -> list[str]:
    """The process ids whose command line holds ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(cmdline.parent.name)
    return found


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc to find what is left running")
def test_a_script_check_that_runs_past_its_timeout_fails_and_leaves_nothing(fake_gpus, monkeypatch, capsys):
    fake_gpus(2)
    real_run_together = gpu_check.run_together
    sleeper = [sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
               "'import time; time.sleep(61)']); print('never')"]  # a command whose child would outlive it
    monkeypatch.setattr(gpu_check, "run_together",
                        lambda commands, timeout, **kwargs: real_run_together([sleeper], timeout=1.0, **kwargs))
    gpu_check.run_checks([("torchrun-train_ddp", gpu_check.check_torchrun_train_ddp)])
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("FAIL  torchrun-train_ddp") and "still running after timeout=1 s" in line
    # the command's child was stopped with it: killed with its process group, it may take the kernel a moment
    # to tear down on a busy machine, so wait for it (bounded) rather than look once
    assert all(gone_within(int(pid)) for pid in _running_with("time.sleep(61)")), _running_with("time.sleep(61)")


def _addition_summary(**changes):
    losses = [2.5 - 0.01 * step for step in range(100)]
    return json.dumps({"backend": "cpu:gloo,cuda:nccl", "device": "cuda", "precision": "float16",
                       "replicas_identical": True, "losses": losses, **changes})


def test_train_addition_summary_is_read_from_rank_0s_last_line():
    assert gpu_check.train_addition_summary("step 50/100: ...\n" + _addition_summary())["device"] == "cuda"
    for printed in ("Traceback ...", "", '{"no": "losses"}'):
        with pytest.raises(gpu_check.CheckFailed, match="printed no summary"):
            gpu_check.train_addition_summary(printed)


@pytest.mark.parametrize(("changes", "verdict"), [
    ({}, "PASS  torchrun-train_addition"),
    ({"backend": "gloo", "device": "cpu"}, "not on the GPUs"),
    ({"precision": "float32"}, "not auto's float16"),
    ({"replicas_identical": False}, "the replicas differ"),
    ({"losses": [2.5] * 100}, "not down 20 %"),
    ({"losses": [float("nan")] * 100}, "not 100 finite global losses"),
])
def test_the_train_addition_check_judges_the_scripts_summary(fake_gpus, monkeypatch, capsys, changes, verdict):
    fake_gpus(2)
    seen = []

    def fake_run_together(commands, timeout, **kwargs):
        seen.extend(commands)
        return [Finished(list(commands[0]), 0, _addition_summary(**changes) + "\n", "")]

    monkeypatch.setattr(gpu_check, "run_together", fake_run_together)
    gpu_check.run_checks([("torchrun-train_addition", gpu_check.check_torchrun_train_addition)])
    line = capsys.readouterr().out.splitlines()[0]
    assert verdict in line and line.startswith("PASS" if not changes else "FAIL")
    assert "--nproc_per_node=2" in seen[0] and "dpedu.scripts.train_addition" in seen[0]


def test_after_a_failed_root_check_the_rest_are_not_run(capsys):
    outcomes = gpu_check.run_checks([("first", passes), ("environment", fails), ("third", passes)])
    assert list(outcomes) == ["first", "environment"]
    assert "      stopped here: every later check needs environment to pass" in capsys.readouterr().out.splitlines()
    assert list(gpu_check.run_checks([("second", fails), ("third", passes)])) == ["second", "third"]  # not a root


def test_a_pass_carries_its_notes_and_the_next_check_starts_without_them(capsys):
    def noted():
        gpu_check.note("/dev/shm has 64 MB")
        return "fine"

    gpu_check.run_checks([("noted", noted), ("plain", passes)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("PASS  noted") and lines[1] == "      note: /dev/shm has 64 MB"
    assert lines[2].startswith("PASS  plain") and len(lines) == 3


@pytest.mark.parametrize(("reason", "words"), [
    ("DistBackendError: NCCL error: unhandled system error", "--shm-size=8g"),
    ("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable", "exclusive-process mode"),
    ("RuntimeError: The NVIDIA driver on your system is too old", "update the NVIDIA driver"),
    ("max |difference| 1.7e-03 (tolerance 1e-4)", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"),
    ("RuntimeError: CUDA error: system not yet initialized", "nvidia-fabricmanager"),
    ("CUDA error: no kernel image is available for execution on the device", "not built for this GPU's architecture"),
    ("2 of 9 GPU lessons failed under nbval; pytest's output is in gpu-check-notebooks.log\n"
     "14_your_loop_in_accelerate: failed: FAILED ...::Cell 27 (the driver's name in an output)", "read the log"),
    ("something nobody foresaw", "NCCL_DEBUG=INFO"),
])
def test_each_known_failure_gets_its_remedy(reason, words):
    assert words in gpu_check.remedy(reason)


def test_a_gpu_the_build_has_no_kernels_for_is_sent_the_other_way_on_a_cuda_12_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # leaves out the V100: the CUDA 12.6 build has it
    assert gpu_check.cuda12_install() in gpu_check.no_kernel_image_remedy()
    monkeypatch.setattr(torch.version, "cuda", "12.6")  # leaves out Blackwell: another cu126 would not help
    said = gpu_check.no_kernel_image_remedy()
    assert "CUDA 12.8 or later" in said and "cu126" not in said


STUCK = """
import subprocess, sys, threading, time
from dpedu import gpu_check

def hangs():
    lesson = subprocess.Popen(["sleep", "60"], start_new_session=True)  # as run_together starts a lesson's pytest
    print(f"started {lesson.pid}", flush=True)
    gpu_check.lessons["02_data_parallelism_by_hand"] = "ran here"
    threading.Event().wait()  # as a collective whose peer never comes

gpu_check.run_checks([("first", lambda: "fine"), ("stuck", hangs), ("never", lambda: "reached")], limit=1)
"""


def test_a_check_that_gives_no_answer_is_a_failure_with_where_it_hung_and_leaves_nothing_running():
    run = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    lines = run.stdout.splitlines()
    assert lines[0].startswith("PASS  first") and lines[1].startswith("started ")
    assert lines[2] == "FAIL  stuck                  no answer within 1 s; where each thread was:"
    assert "in hangs" in run.stdout and "PASS  never" not in run.stdout
    assert lines[-3].startswith("      what to do: ") and "NCCL_P2P_DISABLE=1" in lines[-3]
    assert lines[-2:] == ["so far: 1 passed (first), the check above stuck", "  02_data_parallelism_by_hand: ran here"]
    assert gone_within(int(lines[1].split()[1]))  # in a session of its own, yet killed


def test_the_notebooks_step_may_take_each_lessons_limit_and_a_minute_more(monkeypatch):
    allowed = []

    @contextlib.contextmanager
    def watchdog(name, limit, so_far):
        allowed.append((name, limit))
        yield

    monkeypatch.setattr(gpu_check, "watchdog", watchdog)
    gpu_check.run_checks([("first", lambda: "fine"), ("notebooks", lambda: "fine")], limit=900)
    assert allowed == [("first", 900), ("notebooks", len(gpu_check.gpu_notebooks()) * gpu_check.NOTEBOOK_LIMIT + 60)]


def test_the_gpu_notebooks_are_found_from_their_cells(tmp_path):
    def notebook(name, *sources):
        cells = [{"cell_type": "markdown" if s.startswith("#") else "code", "source": [s]} for s in sources]
        (tmp_path / f"{name}.ipynb").write_text(json.dumps({"cells": cells}))

    notebook("a", "gpus = gpu_count()")
    notebook("b", "if torch.cuda.device_count() >= 2:\n    pass")
    notebook("c", "# we count GPUs with gpu_count() in prose", "x = my_gpu_count")
    assert [p.name for p in gpu_check.gpu_notebooks(tmp_path)] == ["a.ipynb", "b.ipynb"]
    assert [p.stem for p in gpu_check.gpu_notebooks()] == [
        "00_welcome", "01_gd_sgd_minibatch", "02_data_parallelism_by_hand", "03_ddp_from_a_notebook",
        "08a_batchnorm_across_ranks", "11a_shard_what_ddp_copies", "12b_which_parallelism_when",
        "13b_data_loading_and_scaling", "14_your_loop_in_accelerate",
        "appendix_circulating_code"]


def test_each_lessons_gpu_cells_need_no_more_gpus_than_its_verdict_says():
    """GPUS_FOR_EVERY_CELL against the thresholds written in the cells (lesson 12's 8, two per rank for 4 ranks, is
    inside dpedu's split_devices, where no cell shows it)."""
    threshold = re.compile(r"(?:gpus|gpu_count\(\))\s*>=\s*(\d+)")
    lessons = {path.stem: path for path in gpu_check.gpu_notebooks()}
    assert set(gpu_check.GPUS_FOR_EVERY_CELL) <= set(lessons)
    for lesson, path in lessons.items():
        cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        written = max((int(n) for cell in cells for n in threshold.findall(cell)), default=1)
        assert written <= gpu_check.GPUS_FOR_EVERY_CELL.get(lesson, 1), (lesson, written)
    assert gpu_check.GPUS_FOR_EVERY_CELL["12b_which_parallelism_when"] == 8


def test_the_notebook_step_runs_each_lesson_alone_logs_it_and_gives_a_verdict_each(monkeypatch, tmp_path, capsys,
                                                                                   fake_gpus):
    monkeypatch.chdir(tmp_path)
    fake_gpus(1)
    seen = []

    def fake_run_together(commands, timeout, **kwargs):
        seen.append(commands[0])
        if "01_gd_sgd_minibatch" in commands[0][-1]:
            raise TimeoutError("still running")
        if "03_ddp_from_a_notebook" in commands[0][-1]:
            return [Finished(list(commands[0]), 1, "FAILED notebooks/03_ddp_from_a_notebook.ipynb::Cell 45\n"
                                                   "1 failed", "")]
        return [Finished(list(commands[0]), 0, "4 passed", "")]

    monkeypatch.setattr(gpu_check, "run_together", fake_run_together)
    gpu_check.lessons.clear()
    gpu_check.run_checks([("notebooks", gpu_check.check_notebooks)])
    lessons = len(gpu_check.gpu_notebooks())
    assert all("--nbval-current-env" in command for command in seen) and len(seen) == lessons
    assert gpu_check.lessons["00_welcome"] == "ran here on 1 GPU(s)"
    assert gpu_check.lessons["02_data_parallelism_by_hand"] == (
        "ran here on 1 GPU(s); its cells for 2 GPUs took their CPU path")
    assert gpu_check.lessons["01_gd_sgd_minibatch"] == f"did not finish within {gpu_check.NOTEBOOK_LIMIT} s"
    assert gpu_check.lessons["03_ddp_from_a_notebook"] == (
        "failed: FAILED notebooks/03_ddp_from_a_notebook.ipynb::Cell 45")
    out = capsys.readouterr().out
    assert out.startswith("      00_welcome: ran here on 1 GPU(s) (")  # progress, lesson by lesson
    assert f"FAIL  notebooks              2 of {lessons} GPU lessons failed under nbval" in out
    log = (tmp_path / gpu_check.LOG).read_text()
    assert "===== 03_ddp_from_a_notebook.ipynb\nFAILED" in log and str(tmp_path / gpu_check.LOG) in out


def test_nvidia_gpus_that_this_torch_cannot_use_end_the_check_with_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(start_methods, "gpu_count", lambda: 0)
    monkeypatch.setattr(gpu_check.gpus, "system_gpu_count", lambda: 2)  # the driver lists two GPUs
    monkeypatch.setattr(gpu_check, "environment_report", lambda: fake_report(
        gpus=(), warnings=("this machine has NVIDIA GPUs but this torch (2.13.0+cpu) is a CPU-only build: ...",)))
    assert gpu_check.main([]) == 2
    out = capsys.readouterr().out
    assert "Warning: this machine has NVIDIA GPUs but this torch" in out  # the report, with the install line
    assert "FAIL  this machine has 2 NVIDIA GPU(s)" in out and "the warning above says why" in out
    monkeypatch.setattr(gpu_check, "environment_report", lambda: fake_report(gpus=()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_check.main([]) == 2
    assert "CUDA_VISIBLE_DEVICES='' hides them from torch: unset it" in capsys.readouterr().out
