import pytest

from dpedu.cluster.rank_variables import torch_variables


@pytest.mark.parametrize("environ, launcher, rank, size, local", [
    ({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}, "torchrun", "2", "4", "0"),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, "Open MPI", "3", "4", "1"),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, "MPICH", "1", "2", "1"),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "8"}, "Slurm",
     "5", "8", "1"),
])
def test_each_launchers_variables_become_torchs(environ, launcher, rank, size, local):
    name, variables = torch_variables(environ, master_port=1234)
    assert name == launcher
    assert variables == {"RANK": rank, "WORLD_SIZE": size, "LOCAL_RANK": local, "MASTER_ADDR": "127.0.0.1",
                         "MASTER_PORT": "1234"}


def test_torchrun_inside_srun_wins_over_slurm():
    name, variables = torch_variables({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "SLURM_PROCID": "0",
                                       "SLURM_NTASKS": "2", "MASTER_ADDR": "node1", "MASTER_PORT": "29500"})
    assert name == "torchrun" and variables["RANK"] == "3" and variables["MASTER_ADDR"] == "node1"
    assert variables["MASTER_PORT"] == "29500"


def test_the_jobs_own_master_port_wins_over_the_argument():
    _, variables = torch_variables({"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2",
                                    "MASTER_PORT": "4000"}, master_port=1)
    assert variables["MASTER_PORT"] == "4000"


def test_several_nodes_need_master_addr_from_the_job():
    two_nodes = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                 "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
    with pytest.raises(ValueError, match="more than one node.*MASTER_ADDR is not set"):
        torch_variables(two_nodes, master_port=1)
    _, variables = torch_variables({**two_nodes, "MASTER_ADDR": "node1"}, master_port=1)
    assert variables["MASTER_ADDR"] == "node1" and variables["LOCAL_RANK"] == "1"


def test_no_launcher_is_a_clear_error():
    with pytest.raises(ValueError, match="no launcher's rank variables found.*PMI_RANK"):
        torch_variables({"HOME": "/root"}, master_port=1)


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="PMI_RANK=2 is not a rank of PMI_SIZE=2"):
        torch_variables({"PMI_RANK": "2", "PMI_SIZE": "2"}, master_port=1)


@pytest.mark.parametrize("environ, message", [
    ({"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}, "MASTER_PORT is not set"),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, "MPI_LOCALRANKID .* is not set"),
    ({"PMI_RANK": "zero", "PMI_SIZE": "2"}, "PMI_RANK must be a whole number, got 'zero'"),
])
def test_missing_or_broken_variables_are_named(environ, message):
    with pytest.raises(ValueError, match=message):
        torch_variables(environ)
