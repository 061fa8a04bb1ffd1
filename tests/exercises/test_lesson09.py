import numpy as np
import pytest

from dpedu.exercises import lesson09
from dpedu.exercises.answers import my_rank_and_size  # the model answer


def test_global_rank_follows_torchruns_numbering():
    assert lesson09.global_rank(4, 2, 3, 11)
    assert not lesson09.global_rank(4, 2, 3, 7)
    with pytest.raises(ValueError, match="local_rank"):
        lesson09.global_rank(4, 0, 4, 4)


def _slurm_first(environ):
    for rank, size in (("SLURM_PROCID", "SLURM_NTASKS"), ("RANK", "WORLD_SIZE"),
                       ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if rank in environ:
            return int(environ[rank]), int(environ[size])


def test_rank_and_size_accepts_a_right_mapping_and_catches_wrong_ones(capsys):
    assert lesson09.rank_and_size(my_rank_and_size)
    assert not lesson09.rank_and_size(_slurm_first)  # torchrun inside srun: its RANK is the right one
    assert not lesson09.rank_and_size(lambda environ: (environ["RANK"], environ["WORLD_SIZE"]))  # raises
    assert "KeyError" in capsys.readouterr().out
    with pytest.raises(TypeError, match="my_function"):
        lesson09.rank_and_size(3)


def test_bucket_milliseconds_uses_the_ring_and_the_cited_bandwidth():
    assert lesson09.bucket_milliseconds("10 GbE", 8, 2 * 7 / 8 * 25 * 2**20 / 1.25e9 * 1e3)
    assert not lesson09.bucket_milliseconds("10 GbE", 8, 25 * 2**20 / 1.25e9 * 1e3)  # one copy of the bucket
    with pytest.raises(ValueError, match="link must be one of"):
        lesson09.bucket_milliseconds("Wi-Fi", 8, 1.0)


def test_gradient_parameters_inverts_the_rings_bandwidth_term():
    assert lesson09.gradient_parameters("10 GbE", 8, 1.0, 1.25e9 / 7)
    assert not lesson09.gradient_parameters("10 GbE", 8, 1.0, 1.25e9 / 4)  # one copy of the gradients, not 1.75
    with pytest.raises(ValueError, match="seconds"):
        lesson09.gradient_parameters("10 GbE", 8, 0, 1.0)


RIGHT = ("torchrun --nnodes=4 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=node1:29400 --rdzv-id=job1 "
         "-m dpedu.scripts.train_ddp")


@pytest.mark.parametrize("command", [
    RIGHT,
    RIGHT.replace("--nproc-per-node=8", "--nproc_per_node 8").replace("--nnodes=4", "--nnodes=4:4"),
    RIGHT.replace("torchrun", "python3 -m torch.distributed.run") + " --steps 10",  # the script's own options after
    RIGHT.replace("-m dpedu", "--node-rank=1 -m dpedu"),  # given, and ignored by the c10d rendezvous
    RIGHT.replace(" --rdzv-id=job1", ""),  # torchrun's default id serves one job
    RIGHT.replace("node1:29400", "node1").replace("--nproc-per-node=8", "--nproc-per-node=gpu"),  # c10d's port
    "OMP_NUM_THREADS=1 /usr/local/bin/" + RIGHT,
])
def test_torchrun_command_accepts_what_torchrun_would_run_on_every_node(command):
    assert lesson09.torchrun_command(command)


@pytest.mark.parametrize(("command", "said"), [
    (RIGHT.replace("--nnodes=4", "--nnodes=2"), "--nnodes"),
    (RIGHT.replace("--nproc-per-node=8", "--nproc-per-node=4"), "--nproc-per-node"),
    (RIGHT.replace("node1:29400", "node2:29400"), "--rdzv-endpoint"),
    (RIGHT.replace("-m dpedu.scripts.train_ddp", "dpedu/scripts/train_ddp.py"), "as a module"),
    (RIGHT.replace("--nnodes=4", "--standalone --nnodes=4"), "--rdzv-backend=c10d, without --standalone"),
    ("torchrun --nnodes=4 --nproc-per-node=8 --node-rank=1 --master-addr=node1 --master-port=29400 "
     "-m dpedu.scripts.train_ddp", "--rdzv-backend=c10d"),  # the static form: not this job's rendezvous
    (RIGHT.replace("--rdzv-id", "--rdzv-name"), "unrecognized arguments"),  # torchrun itself refuses it
    ("mpirun -n 32 python -m dpedu.scripts.train_ddp", "start with torchrun"),
])
def test_torchrun_command_catches_a_wrong_line_and_says_what_is_wrong(command, said, capsys):
    assert not lesson09.torchrun_command(command)
    assert said in capsys.readouterr().out


def test_torchrun_command_wants_a_string():
    with pytest.raises(TypeError, match="answer must be the command as one string"):
        lesson09.torchrun_command(["torchrun"])


def test_global_rank_takes_a_numpy_number_and_refuses_text():
    assert lesson09.global_rank(8, 2, 3, np.int64(19)) and not lesson09.global_rank(8, 2, 3, np.int64(13))
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson09.global_rank(8, 2, 3, "19")
