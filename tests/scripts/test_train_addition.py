"""dpedu.scripts.train_addition under torchrun: 1 and 2 ranks at the same global batch are the same run (to float
rounding), and their summaries' MFU is tokens/s x FLOPs per token over the ranks' measured peak; rank 0 alone logs
loss, tokens/s and MFU, unless DPEDU_QUIET=1. Its ``train`` in launched ranks (each torchrun start costs seconds of
imports; what these check is the script's, not torchrun's): stopped mid-epoch and resumed, a run ends bit-identical
to an uninterrupted one; a global batch the ranks cannot split and a missing checkpoint are refused by name; with
float16's GradScaler faked on CPU, the noise-scale record leaves out the steps the scaler skipped and holds unscaled
norms; a checkpoint of another precision or device is refused with the script's message. Bad arguments:
test_arguments.py."""

import json
import math
import re
import sys
import time
from contextlib import nullcontext
from unittest import mock

import pytest
import torch

from dpedu import RankFailedError, launch
from dpedu.runtime.commands import run_together
from dpedu.runtime.rendezvous import loopback_interface
from dpedu.scripts import train_addition
from dpedu.sgd.noise_scale import two_batch_noise_scale

# CPU ranks with one thread each, talking over loopback, as in lesson 03; no progress bar.
ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "DPEDU_QUIET": "1",
       **({"GLOO_SOCKET_IFNAME": lo} if (lo := loopback_interface()) else {})}
SHORT = ["--steps", "150", "--warmup", "20", "--train-examples", "2000"]  # 31 steps per epoch of 64 examples


def torchrun(ranks: int, *arguments: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
            "-m", "dpedu.scripts.train_addition", *arguments]


def summary(finished) -> dict:
    assert finished.returncode == 0, finished.stderr[-3000:]
    return json.loads(finished.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def short_runs():
    """The same run on 1 rank, on 2 with --noise-scale and on 2 with rank 0's logs (DPEDU_QUIET=0), at once: what
    each printed. The logged run logs the loss and the held-out accuracy at step 75 of 150; the 1-rank run
    evaluates then too, quietly."""
    evaluated = [*SHORT, "--eval-every", "75"]
    logged = ["env", "DPEDU_QUIET=0", *torchrun(2, *evaluated, "--log-every", "75")]
    one, two, logged = run_together([torchrun(1, *evaluated), torchrun(2, *SHORT, "--noise-scale"), logged],
                                    timeout=180, env=ENV)
    return {"one": one, "two": two, "logged": logged}


def test_one_and_two_ranks_at_the_same_global_batch_are_the_same_run(short_runs):
    # --noise-scale on 2 ranks: its hook must leave the run exactly as it is without it (nor do logs and evaluations
    # change it: the run without the hook logs)
    one, two, unhooked = (summary(short_runs[name]) for name in ("one", "two", "logged"))
    assert two["losses"] == unhooked["losses"] and two["checksum"] == unhooked["checksum"]
    assert (one["world_size"], two["world_size"], two["micro_batch"], two["backend"]) == (1, 2, 32, "gloo")
    assert len(one["losses"]) == len(two["losses"]) == 150 and two["replicas_identical"]
    # The same examples at every step; only the order of float additions differs (one rank's batch mean
    # against the average of two half-batch means). The losses agree within 1e-6 for ~90 steps, then Adam
    # amplifies the rounding: measured at 150 steps, losses within 7e-5, checksums (~315) within 1e-3. Far
    # longer runs drift apart for good (1,000 steps: checksums differ by ~2 %) yet learn alike.
    assert max(abs(a - b) for a, b in zip(one["losses"], two["losses"], strict=True)) < 1e-3
    assert max(abs(a - b) for a, b in zip(one["losses"][:50], two["losses"][:50], strict=True)) < 1e-5
    assert abs(one["checksum"] - two["checksum"]) < 1e-2
    assert one["losses"][-1] < 0.8 * one["losses"][0]  # it learns (the full default run reaches ~100 %)
    for run in (one, two):  # MFU: the model's FLOPs (6 N + 12 L d T per token) over the ranks' measured peak
        assert run["flops_per_token"] == 617_472 and run["peak_flops"] > 0
        assert run["tokens_per_second"] == pytest.approx(8 * run["samples_per_second"])  # "12+39=15" read, "0" not
        assert run["mfu"] == pytest.approx(run["tokens_per_second"] * run["flops_per_token"]
                                           / (run["world_size"] * run["peak_flops"]))
        assert 0 < run["mfu"] < 1
    noise = two["noise_scale"]
    assert (noise["per_rank_examples"], noise["global_batch"], len(noise["local_sq"]), len(noise["global_sq"])) \
        == (32, 64, 150, 150) and "noise_scale" not in one
    # the mean of the ranks' |g|^2 is at least the |mean g|^2 (Jensen), at every step
    assert all(local >= averaged > 0 for local, averaged in zip(noise["local_sq"], noise["global_sq"], strict=True))


def test_a_run_stopped_mid_epoch_and_resumed_ends_bit_identical_to_an_uninterrupted_one(tmp_path):
    # Dropout and accumulation make the random states and no_sync part of what must survive the restart.
    # Evaluating every 50 steps in the middle switches dropout off and on again: the run must not notice.
    # In launched ranks: the subject is what the checkpoint holds, not torchrun (lesson 13a resumes under torchrun).
    unevaluated = [*SHORT, "--dropout", "0.1", "--accumulate", "2", "--checkpoint-every", "40"]
    run = [*unevaluated, "--eval-every", "50"]
    first, uninterrupted, plain = (
        trained(2, *arguments, "--checkpoint", str(tmp_path / name))
        for arguments, name in (([*run, "--stop-after-step", "100"], "stopped.pt"), (run, "whole.pt"),
                                (unevaluated, "plain.pt")))
    # Stopped after step 100 "as if killed": the last checkpoint is step 80, epoch 2 at step 18 of 31.
    assert first == {"stopped_after_step": 100, "checkpoint_step": 80}
    checkpoint = torch.load(tmp_path / "stopped.pt", weights_only=True)
    assert (checkpoint["step"], checkpoint["epoch"], checkpoint["position"]) == (80, 2, 18)
    resumed = trained(2, *run, "--checkpoint", str(tmp_path / "stopped.pt"), "--resume")
    assert resumed["resumed_from_step"] == 80 and uninterrupted["resumed_from_step"] == 0
    assert resumed["losses"] == uninterrupted["losses"] and resumed["checksum"] == uninterrupted["checksum"]
    assert [step for step, _ in uninterrupted["heldout_curve"]] == [50, 100, 150]  # the last one: the final
    assert resumed["heldout_curve"] == uninterrupted["heldout_curve"]  # the evaluations before 80, kept
    assert uninterrupted["heldout_curve"][-1][1] == uninterrupted["heldout_accuracy"]
    assert plain["losses"] == uninterrupted["losses"] and plain["heldout_curve"] == [(150, plain["heldout_accuracy"])]
    a, b = (torch.load(tmp_path / name, weights_only=True) for name in ("stopped.pt", "whole.pt"))
    assert a["step"] == b["step"] == 150
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    assert all(torch.equal(a["optimizer"]["state"][i]["exp_avg_sq"], b["optimizer"]["state"][i]["exp_avg_sq"])
               for i in b["optimizer"]["state"])


def test_a_global_batch_the_ranks_cannot_split_and_a_missing_checkpoint_fail_with_clear_errors(tmp_path):
    with pytest.raises(RankFailedError, match=re.escape("--global-batch 63 must be a multiple of ranks x --accumulate "
                                                        "= 2 x 1 = 2")):
        launch(run_train, 2, (["--global-batch", "63"],), timeout=60)
    (no_checkpoint,) = launch(run_train, 1, (["--resume", "--checkpoint", str(tmp_path / "none.pt")],), timeout=60)
    assert "there is no checkpoint at" in no_checkpoint["exit"]


def test_float16_is_refused_on_the_cpu():
    from dpedu.training_run.step import resolve_precision
    assert resolve_precision("auto", torch.device("cpu")) == "float32"
    assert resolve_precision("auto", torch.device("cuda", 0)) == "float16"
    with pytest.raises(ValueError, match="--precision float16 needs CUDA"):
        resolve_precision("float16", torch.device("cpu"))


# Small enough for a second per launch: 16 steps of 16 examples, 8 per rank.
TINY = ["--width", "16", "--heads", "2", "--layers", "1", "--train-examples", "256", "--heldout-examples", "30",
        "--steps", "16", "--warmup", "2", "--global-batch", "16"]


def run_train(argv: list[str], precision: str = "float32", init_scale: float | None = None) -> dict:
    """On each launched rank: the script's ``train`` on the CPU, in this process. With ``init_scale`` its
    GradScaler is on whatever the precision, starting at that scale: float16's loss scaling, faked on float32
    gradients, noting the steps it skipped (the scale falls exactly then). Returns the summary (rank 0; None
    elsewhere), those steps, and the message of a ``SystemExit``."""
    skipped = []

    class NotingScaler(torch.amp.GradScaler):
        def __init__(self, device: str, enabled: bool):
            super().__init__(device, init_scale=init_scale)
            self.steps = 0

        def update(self, new_scale=None):
            before = self.get_scale()
            super().update(new_scale)
            self.steps += 1
            if self.get_scale() < before:
                skipped.append(self.steps)

    patched = mock.patch.object(torch.amp, "GradScaler", NotingScaler) if init_scale else nullcontext()
    try:
        with patched:
            summary = train_addition.train(train_addition.arguments(argv), torch.device("cpu"), precision,
                                           time.perf_counter())
    except SystemExit as exit:
        return {"summary": None, "skipped": skipped, "exit": str(exit)}
    return {"summary": summary, "skipped": skipped, "exit": None}


def trained(ranks: int, *argv: str) -> dict:
    """Rank 0's summary of the script's ``train`` on ``ranks`` launched ranks, which must all finish."""
    results = launch(run_train, ranks, (list(argv),), timeout=120)
    assert all(result["exit"] is None for result in results), [result["exit"] for result in results]
    return results[0]["summary"]


def test_noise_scale_leaves_out_the_steps_the_scaler_skipped_and_records_unscaled_norms():
    # 2^127 overflows the scaled float32 gradients, as float16's start at 2^16 often does: GradScaler halves the
    # scale and skips the step until the gradients fit. 2^10 overflows nothing: the run is the plain one.
    plain, scaled, overflowing = (launch(run_train, 2, ([*TINY, "--noise-scale"], "float32", scale), timeout=60)
                                  for scale in (None, 2.0**10, 2.0**127))
    skipped = overflowing[0]["skipped"]
    assert skipped and skipped == overflowing[1]["skipped"] and plain[0]["skipped"] == scaled[0]["skipped"] == []
    noise = overflowing[0]["summary"]["noise_scale"]
    assert noise["skipped_steps"] == skipped  # step numbers counted from 1, as the log's
    assert len(noise["local_sq"]) == len(noise["global_sq"]) == 16 - len(skipped)
    assert all(math.isfinite(value) and value > 0 for value in noise["local_sq"] + noise["global_sq"])
    json.dumps(overflowing[0]["summary"], allow_nan=False)  # standard JSON: no Infinity or NaN
    assert math.isfinite(two_batch_noise_scale(noise["local_sq"], noise["global_sq"], 8, 16))  # lesson 13's use
    # The hook sees gradients times the scale; the record divides by its square. A power of two scales exactly,
    # so the scaled run's record and losses are the plain run's, bit for bit.
    plain, scaled = plain[0]["summary"], scaled[0]["summary"]
    assert scaled["noise_scale"] == plain["noise_scale"] and scaled["losses"] == plain["losses"]
    assert plain["noise_scale"]["skipped_steps"] == []


def test_a_checkpoint_of_another_precision_or_device_is_refused_with_the_scripts_message(tmp_path):
    checkpoint = str(tmp_path / "cpu.pt")
    (written, _) = launch(run_train, 2, ([*TINY, "--checkpoint", checkpoint],), timeout=60)
    assert written["summary"]["precision"] == "float32"
    resume = [*TINY, "--checkpoint", checkpoint, "--resume"]

    def refusal(precision: str = "float32") -> str:
        first, second = launch(run_train, 2, (resume, precision), timeout=60)
        assert first["exit"] == second["exit"] is not None  # every rank stops, none waits for the others
        return first["exit"]

    # A CPU checkpoint resumed on a GPU, where auto means float16 (faked here on the CPU): stopped before the
    # GradScaler's load_state_dict, which would fail with "The source state dict is empty".
    assert "the checkpoint is of another run (different precision: float32 in the checkpoint, float16 here)" \
        in refusal("float16")
    state = torch.load(checkpoint, weights_only=True)
    state["settings"]["device"] = "cuda"  # a GPU's checkpoint, resumed on the CPU
    torch.save(state, checkpoint)
    assert "(different device: cuda in the checkpoint, cpu here)" in refusal()
    del state["settings"]["device"], state["settings"]["precision"]  # written before they were recorded
    torch.save(state, checkpoint)
    assert ("(different precision: not recorded in the checkpoint, float32 here; device: not recorded in the "
            "checkpoint, cpu here): resume with its settings, or start afresh without --resume") in refusal()


def test_rank_0_logs_the_global_loss_tokens_per_second_and_mfu_unless_quiet(short_runs):
    lines = short_runs["logged"].stdout.splitlines()[:-1]  # the summary last
    assert [line.split(":")[0] for line in lines] == ["step 75/150", "step 75/150", "step 150/150"]  # rank 0's only
    assert re.fullmatch(r"step 75/150: global loss \d\.\d{4}, lr \d\.\d\de-\d\d, [\d,]+ tokens/s, MFU \d+\.\d%",
                        lines[0])
    assert re.fullmatch(r"step 75/150: held-out exact match \d\.\d{3}", lines[1])
    # quiet (the other runs, the 1-rank one evaluating at step 75), the summary alone; the same run either way
    assert [len(short_runs[name].stdout.splitlines()) for name in ("one", "two")] == [1, 1]
