import pytest

from dpedu.exercises import lesson08
from dpedu.exercises.answers import my_rank_and_size  # the model answer


def test_global_rank_follows_torchruns_numbering():
    assert lesson08.global_rank(4, 2, 3, 11)
    assert not lesson08.global_rank(4, 2, 3, 7)
    with pytest.raises(ValueError, match="local_rank"):
        lesson08.global_rank(4, 0, 4, 4)


def _slurm_first(environ):
    for rank, size in (("SLURM_PROCID", "SLURM_NTASKS"), ("RANK", "WORLD_SIZE"),
                       ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if rank in environ:
            return int(environ[rank]), int(environ[size])


def test_rank_and_size_accepts_a_right_mapping_and_catches_wrong_ones(capsys):
    assert lesson08.rank_and_size(my_rank_and_size)
    assert not lesson08.rank_and_size(_slurm_first)  # torchrun inside srun: its RANK is the right one
    assert not lesson08.rank_and_size(lambda environ: (environ["RANK"], environ["WORLD_SIZE"]))  # raises
    assert "KeyError" in capsys.readouterr().out
    with pytest.raises(TypeError, match="my_function"):
        lesson08.rank_and_size(3)


def test_bucket_milliseconds_uses_the_ring_and_the_cited_bandwidth():
    assert lesson08.bucket_milliseconds("10 GbE", 8, 2 * 7 / 8 * 25 * 2**20 / 1.25e9 * 1e3)
    assert not lesson08.bucket_milliseconds("10 GbE", 8, 25 * 2**20 / 1.25e9 * 1e3)  # one copy of the bucket
    with pytest.raises(ValueError, match="link must be one of"):
        lesson08.bucket_milliseconds("Wi-Fi", 8, 1.0)


def test_steps_per_epoch_counts_the_samplers_padding():
    assert lesson08.steps_per_epoch(64, 2, 22) and lesson08.steps_per_epoch(64, 4, 22)
    assert lesson08.steps_per_epoch(80, 2, 17) and lesson08.steps_per_epoch(80, 4, 18)  # 360 // 20, padded
    assert not lesson08.steps_per_epoch(80, 4, 17)
    with pytest.raises(ValueError, match="workers"):
        lesson08.steps_per_epoch(80, 3, 17)
