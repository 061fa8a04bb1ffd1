"""Train the digits network with DDP on however many workers torchrun gives it, the global batch fixed: lesson 10.

An elastic job: each node starts the same command, and the job runs on between MIN and MAX of them,
going on from the last checkpoint whenever one leaves or joins (here two "nodes" on one machine):
    torchrun --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29400 \\
        --rdzv-id=job --max-restarts=1 -m dpedu.scripts.train_elastic --checkpoint ckpt.pt --final final.pt

When a node leaves, the survivors' next collective fails, their agents restart them (one of
--max-restarts) and meet again without it; when one joins, the agents restart their workers to let it
in (not counted as a restart). Every start reads the checkpoint, the step it was written at and the
world size of the workers that wrote it.

What must change with the world size, and what must not: the global batch stays --global-batch-size,
so each worker takes global / WORLD_SIZE examples a step, and DistributedSampler deals each global
batch out to however many workers there are (it hands the examples to the ranks in turn, so the ranks'
k-th batches together are the same examples whatever their number). The mean gradient of a step, and
so the learning rate, are then those of a fixed world, and a run that shrinks and grows ends within
float rounding of one that never did. Steps per epoch must not change either, or step k would read
other examples after a resize: the script refuses a checkpoint whose epochs had another length.

Two options make a node's coming and going happen at a known step, for lesson 10's comparison:
--leave-at-step S, given to one node's command only: on reaching step S, that node's workers SIGKILL
their agent and themselves, as when a machine is lost. (Not the node that serves the rendezvous: the job
cannot outlive it. Group ranks come from each rendezvous, ordered by host and process id, so the node
to lose is named by its command line.) --wait-at-step S: on reaching step S with fewer than
--full-world workers, the workers checkpoint and wait (up to --join-timeout seconds) for the node that
their agent will let in; a real job trains on, and the join costs it the steps since its last checkpoint.

All ranks run on the CPU with gloo, GPUs or not: the lesson compares runs within float rounding.
"""

import argparse
import contextlib
import os
import signal
import time

import torch
import torch.distributed as dist

from dpedu.cluster.checkpoints import load_checkpoint, save_atomically, save_on_rank_zero

# Importing dpedu.data_parallel.digits_ddp also imports torch._dynamo before the process group exists; a
# script without it can abort at exit after using DDP (the note in dpedu/data_parallel/digits_ddp.py says why).
from dpedu.data_parallel import digits_ddp


def leave() -> None:
    """Lose this node: its agent and this worker SIGKILLed, no clean-up, no message (the node's other
    workers do the same at the same step)."""
    with contextlib.suppress(ProcessLookupError):  # another worker of this node may have killed it first
        os.kill(os.getppid(), signal.SIGKILL)  # torchrun's agent, which started this worker
    os.kill(os.getpid(), signal.SIGKILL)


def wait_for_a_node(seconds: float) -> None:
    """Sleep until the agent stops this worker to let a new node in; SystemExit after ``seconds``."""
    time.sleep(seconds)
    raise SystemExit(f"no node joined within --join-timeout {seconds:g} s")


def batch_for_this_world(global_batch_size: int, checkpoint: dict | None) -> tuple[int, int]:
    """This worker's share of the global batch, and the steps per epoch, on this world's workers.

    The global batch stays ``global_batch_size`` whatever the number of workers, so the learning rate
    stays too; the epochs keep the length they had in ``checkpoint``, or step k would read other examples."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if global_batch_size % world:
        raise SystemExit(f"--global-batch-size {global_batch_size} does not divide among {world} workers")
    per_worker = global_batch_size // world
    steps_per_epoch = len(digits_ddp.digits_loader(per_worker, num_replicas=world, rank=rank))
    if checkpoint is not None and checkpoint["steps_per_epoch"] != steps_per_epoch:
        raise SystemExit(f"the checkpoint's epochs had {checkpoint['steps_per_epoch']} steps of {global_batch_size} "
                         f"examples, on {world} workers they have {steps_per_epoch}: choose a global batch that "
                         f"gives every world size the same")
    return per_worker, steps_per_epoch


def train(args: argparse.Namespace) -> tuple[dict, int]:
    """Train from the last checkpoint (or from scratch) to step ``args.steps`` on this world's workers;
    return the final state (model and optimizer) and the step this start resumed from."""
    rank, world = dist.get_rank(), dist.get_world_size()
    state = load_checkpoint(args.checkpoint)
    start = 0 if state is None else state["step"]
    per_worker, steps_per_epoch = batch_for_this_world(args.global_batch_size, state)

    def checkpoint(state: dict, step: int) -> dict:  # what the next start needs to check its world against
        return {**state, "step": step, "world": world, "steps_per_epoch": steps_per_epoch}

    if rank == 0:
        print(f"{world} worker(s), {per_worker} examples each a step: "
              + (f"resuming from the checkpoint of step {start}, written by {state['world']} worker(s)"
                 if state is not None else "starting at step 0"), flush=True)
    stops = {*range(args.checkpoint_every, args.steps, args.checkpoint_every), args.steps}
    stops |= {s for s in (args.leave_at_step, args.wait_at_step) if s is not None and s < args.steps}
    step = start
    for stop in sorted(s for s in stops if s > start):
        if step == args.leave_at_step:
            leave()
        if step == args.wait_at_step and world < args.full_world:
            save_on_rank_zero(checkpoint(state, step), args.checkpoint)
            if rank == 0:
                print(f"step {step} on {world} worker(s): checkpointed, waiting for a node to join", flush=True)
            wait_for_a_node(args.join_timeout)
        state = digits_ddp.train(steps=stop - step, batch_size=per_worker, lr=args.lr, momentum=args.momentum,
                                 state=state, start_step=step)
        step = stop
        if step % args.checkpoint_every == 0:
            save_on_rank_zero(checkpoint(state, step), args.checkpoint)
    return state, start


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (``sys.argv`` without ``argv``); a bad one exits with its message, before any
    process group exists."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps in the whole run")
    parser.add_argument("--global-batch-size", type=int, default=64, help="examples per step, all workers together")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--checkpoint", required=True, help="file every worker can read; rank 0 writes it")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    parser.add_argument("--final", help="where rank 0 saves the final parameters")
    parser.add_argument("--leave-at-step", type=int, default=None, help="this node is lost at this step")
    parser.add_argument("--wait-at-step", type=int, default=None, help="wait here for a node to join")
    parser.add_argument("--full-world", type=int, default=None, help="workers in the whole job (--wait-at-step)")
    parser.add_argument("--join-timeout", type=float, default=60.0, help="seconds to wait for a node to join")
    args = parser.parse_args(argv)
    if args.steps < 0 or args.checkpoint_every < 1 or args.global_batch_size < 1:
        parser.error("--steps must be >= 0, --checkpoint-every and --global-batch-size >= 1")
    if (args.wait_at_step is None) != (args.full_world is None):
        parser.error("--wait-at-step and --full-world go together")
    if any(s is not None and s < 1 for s in (args.leave_at_step, args.wait_at_step)):
        parser.error("--leave-at-step and --wait-at-step must be >= 1")
    return args


def main() -> None:
    args = arguments()
    dist.init_process_group("gloo")  # reads the variables torchrun set
    torch.set_num_threads(1)
    try:
        state, start = train(args)
        identical = digits_ddp.same_parameters_on_every_rank(state)
        if dist.get_rank() == 0:
            if args.final:
                save_atomically(state["model"], args.final)
            print(f"{dist.get_world_size()} worker(s): from step {start} to step {args.steps}, "
                  f"replicas identical: {identical}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
