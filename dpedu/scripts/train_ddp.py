"""Train the digits network with DistributedDataParallel: the script lesson 03 runs under torchrun.

One machine, two processes:
    torchrun --standalone --nproc_per_node=2 -m dpedu.scripts.train_ddp --steps 10 --batch-size 32

Two machines (run one line on each; HOST is the first machine's address, PORT a free port on it):
    torchrun --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT --rdzv_id=job1 \\
        -m dpedu.scripts.train_ddp

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT in every
process; the script only has to call init_process_group. When every process on a machine can have a
GPU of its own, each uses its own; otherwise all of them run on the CPU (ranks must agree).
"""

import argparse
import os

import torch
import torch.distributed as dist

# Importing dpedu.data_parallel.digits_ddp also imports torch._dynamo before the process group exists; a
# script without it can abort at exit after using DDP (the note in dpedu/data_parallel/digits_ddp.py says why).
from dpedu.data_parallel import digits_ddp
from dpedu.datasets import digits
from dpedu.models import mlp
from dpedu.runtime.float32_precision import pin_full_float32_precision
from dpedu.runtime.gpus import one_gpu_per_local_rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="examples per rank per step")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--show-env", action="store_true", help="print the variables torchrun set in each rank")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    gpus = one_gpu_per_local_rank(local_rank, int(os.environ["LOCAL_WORLD_SIZE"]), "train_ddp")  # same on every rank
    device = torch.device("cuda", local_rank) if gpus else torch.device("cpu")
    if gpus:
        torch.cuda.set_device(device)
        pin_full_float32_precision()  # ./course check-gpu compares the result with one CPU process: no TF32
    # nccl moves CUDA tensors; gloo keeps CPU collectives (the replica check below) working beside it.
    dist.init_process_group("cpu:gloo,cuda:nccl" if gpus else "gloo")  # reads the variables torchrun set
    torch.set_num_threads(1)
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        if args.show_env:
            show_torchrun_variables()
        state = digits_ddp.train(steps=args.steps, batch_size=args.batch_size, lr=args.lr, device=device)
        identical = digits_ddp.same_parameters_on_every_rank(state)
        if rank == 0:  # one rank reports, or every line would be printed world_size times
            model = mlp(64, 32, 10)
            model.load_state_dict(state["model"])
            test = digits()
            accuracy = (model(test.X_test).argmax(1) == test.y_test).double().mean().item()
            checksum = digits_ddp.parameter_checksum(state)
            print(f"{world_size} rank(s) on {dist.get_backend()}, {args.steps} steps of "
                  f"{world_size} x {args.batch_size} examples: parameter checksum {checksum:.5f}, "
                  f"test accuracy {accuracy:.3f}, replicas identical: {identical}")
    finally:
        dist.destroy_process_group()


TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT")


def show_torchrun_variables() -> None:
    """Rank 0 prints what torchrun told each rank, in rank order (each rank's own print would interleave)."""
    mine = " ".join(f"{name}={os.environ[name]}" for name in TORCHRUN_VARIABLES)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if dist.get_rank() == 0:
        print("\n".join(everyone))


if __name__ == "__main__":
    main()
