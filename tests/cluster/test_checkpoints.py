"""dpedu.cluster.checkpoints: a checkpoint is replaced whole or not at all, even when its writer is killed mid-save."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dpedu import launch
from dpedu.cluster.checkpoints import load_checkpoint, save_atomically, save_on_rank_zero
from dpedu.models import mlp

REPOSITORY = Path(__file__).resolve().parents[2]


def training_state(step: int) -> dict:
    model = mlp(64, 32, 10, seed=step)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 64)).sum().backward()
    optimizer.step()  # now the optimizer holds momentum buffers
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        elif isinstance(a[key], dict):
            assert_same(a[key], b[key])
        else:
            assert a[key] == b[key], key


def test_round_trip_of_model_optimizer_and_step_leaves_no_temporary_file(tmp_path):
    state = training_state(7)
    path = tmp_path / "checkpoint.pt"
    save_atomically(state, path)
    loaded = load_checkpoint(path)
    assert_same(loaded["model"], state["model"])
    assert loaded["step"] == 7
    momentum = loaded["optimizer"]["state"][0]["momentum_buffer"]
    assert torch.equal(momentum, state["optimizer"]["state"][0]["momentum_buffer"])
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_a_second_save_replaces_the_first_and_str_paths_work(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    save_atomically(training_state(1), path)
    save_atomically(training_state(2), path)
    assert load_checkpoint(path)["step"] == 2
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_no_checkpoint_yet_is_none(tmp_path):
    assert load_checkpoint(tmp_path / "absent.pt") is None


def test_a_save_that_fails_before_the_rename_keeps_the_old_checkpoint_and_cleans_up(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_atomically(training_state(1), path)

    def crash(source, destination):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk went away"):
        save_atomically(training_state(2), path)
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_a_writer_sigkilled_mid_save_leaves_the_old_checkpoint_whole(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_atomically(training_state(1), path)
    # The child writes the whole new file, then dies where the data has reached the disk but the rename
    # has not happened: SIGKILL runs no clean-up, so its temporary file stays behind.
    child = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPOSITORY)!r})
        import torch
        from dpedu.cluster.checkpoints import save_atomically
        os.fsync = lambda descriptor: os.kill(os.getpid(), signal.SIGKILL)
        save_atomically({{"step": 2, "weights": torch.ones(1000)}}, {str(path)!r})
    """)
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert result.returncode == -9, result.stderr
    assert load_checkpoint(path)["step"] == 1
    leftovers = [name for name in os.listdir(tmp_path) if name != "checkpoint.pt"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".checkpoint.pt.") and leftovers[0].endswith(".tmp")


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(TypeError, match="state must be a dict"):
        save_atomically([1, 2], tmp_path / "c.pt")
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        save_atomically({}, 3)
    with pytest.raises(TypeError, match="path must be a str or os.PathLike"):
        load_checkpoint(None)
    with pytest.raises(ValueError, match="path must be a non-empty"):
        load_checkpoint("")
    with pytest.raises(ValueError, match="is a directory"):
        save_atomically({}, tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_atomically({}, tmp_path / "no such directory" / "c.pt")


def test_a_file_that_is_not_a_checkpoint_dict_is_refused(tmp_path):
    path = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), path)
    with pytest.raises(TypeError, match="not a checkpoint dict"):
        load_checkpoint(path)


def test_arbitrary_objects_are_not_unpickled(tmp_path):
    path = tmp_path / "c.pt"
    torch.save({"step": 1, "callback": print}, path)  # what weights_only refuses to load
    with pytest.raises(Exception, match="[Ww]eights only load failed|Unsupported global"):
        load_checkpoint(path)


def test_a_checkpoint_is_readable_as_the_umask_allows_not_only_by_its_owner(tmp_path):
    old = os.umask(0o022)
    try:
        save_atomically({"step": 1}, tmp_path / "shared.pt")
    finally:
        os.umask(old)
    assert (tmp_path / "shared.pt").stat().st_mode & 0o777 == 0o644  # as torch.save's own file would be


def _save_then_look(path):
    import torch.distributed as dist  # inside the rank

    save_on_rank_zero({"step": dist.get_rank()}, path)  # each rank offers its own: only rank 0's is written
    return load_checkpoint(path)  # after the barrier, every rank finds rank 0's checkpoint whole


def test_save_on_rank_zero_has_one_writer_and_every_rank_finds_its_checkpoint(tmp_path):
    path = str(tmp_path / "checkpoint.pt")
    assert launch(_save_then_look, 2, args=(path,)) == [{"step": 0}, {"step": 0}]
    assert os.listdir(tmp_path) == ["checkpoint.pt"]  # no temporary file left
