"""Train the digits network with DDP and checkpoints, so that torchrun can restart it after a failure: lesson 10.

One machine, two processes; if a worker dies, torchrun stops the others and starts them all again (once):
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 --max-restarts=1 \\
        -m dpedu.scripts.train_resumable --steps 60 --checkpoint-every 20 --checkpoint ckpt.pt --final final.pt

Every run starts from the checkpoint at --checkpoint when there is one: delete it to start afresh.
--kill-rank R --kill-at-step S makes rank R SIGKILL itself on reaching step S, on the first attempt only
(torchrun counts attempts in TORCHELASTIC_RESTART_COUNT), to show what a restart costs and that the
resumed run ends with exactly the parameters of a run that never failed.

TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: since torch 2.5, torchrun's restarted workers meet in the same
key-value store as the failed ones and can read a dead worker's address there; init_process_group then
fails, "Gloo connectFullMesh failed ... Connection refused" (pytorch/pytorch#135712). With the variable and
the c10d rendezvous (--standalone, or --rdzv-backend=c10d), each attempt gets a store of its own; torchrun's
default static rendezvous (--master-addr/--master-port) keeps one store whatever the variable says.

All ranks run on the CPU with gloo, GPUs or not: the lesson compares two runs bit for bit.
"""

import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist

from dpedu.cluster.checkpoints import load_checkpoint, save_atomically, save_on_rank_zero

# Importing dpedu.data_parallel.digits_ddp also imports torch._dynamo before the process group exists; a
# script without it can abort at exit after using DDP (the note in dpedu/data_parallel/digits_ddp.py says why).
from dpedu.data_parallel import digits_ddp


def train(args: argparse.Namespace, attempt: int) -> tuple[dict, int]:
    """Train from the last checkpoint (or from scratch) to step ``args.steps``, checkpointing on the way;
    return the final state (model and optimizer) and the step it resumed from.

    ``digits_ddp.train`` runs each stretch between two stops: it rebuilds the model and the optimizer from the
    state and reads the batches from that step on, so stopping and resuming changes nothing in the result.
    No RNG state is saved: nothing draws random numbers after the model is built, and each step's batch
    depends only on the step number and the rank (the sampler reshuffles with set_epoch)."""
    rank = dist.get_rank()
    # Every rank reads the same file (on several machines, a shared file system), so all start alike.
    # digits_ddp.train's DDP wrapper broadcasts from rank 0 before the first step: every rank has read the
    # checkpoint before rank 0 can overwrite it.
    state = load_checkpoint(args.checkpoint)
    start = 0 if state is None else state["step"]
    if state is not None and rank == 0:
        print(f"attempt {attempt}: resuming from the checkpoint of step {start}", flush=True)
    if start > args.steps:
        raise SystemExit(f"the checkpoint is at step {start}, beyond --steps {args.steps}")
    stops = {*range(args.checkpoint_every, args.steps, args.checkpoint_every), args.steps}
    if args.kill_at_step is not None and args.kill_at_step < args.steps:
        stops.add(args.kill_at_step)
    step = start
    for stop in sorted(s for s in stops if s > start):
        if attempt == 0 and rank == args.kill_rank and step == args.kill_at_step:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash: no exception, no clean-up, no message
        # Momentum: the optimizer has state of its own, which a checkpoint must hold as well as the model.
        state = digits_ddp.train(steps=stop - step, batch_size=args.batch_size, lr=args.lr, momentum=args.momentum,
                          state=state, start_step=step)
        step = stop
        if step % args.checkpoint_every == 0:
            save_on_rank_zero({**state, "step": step}, args.checkpoint)  # a failure from here on resumes from it
    return state, start


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options (``sys.argv`` without ``argv``); a bad one exits with its message, before any
    process group exists."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps in the whole run")
    parser.add_argument("--batch-size", type=int, default=32, help="examples per rank per step")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--checkpoint", required=True, help="file every rank can read; rank 0 writes it")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    parser.add_argument("--final", help="where rank 0 saves the final parameters")
    parser.add_argument("--kill-rank", type=int, default=None)
    parser.add_argument("--kill-at-step", type=int, default=None)
    args = parser.parse_args(argv)
    if args.steps < 0 or args.checkpoint_every < 1:
        parser.error("--steps must be >= 0 and --checkpoint-every >= 1")
    if (args.kill_rank is None) != (args.kill_at_step is None):
        parser.error("--kill-rank and --kill-at-step go together")
    return args


def main() -> None:
    args = arguments()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # 0 first, 1 after one restart, ...
    if (int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0 and os.environ.get("RANK") == "0"
            and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"):  # the case the docstring warns of
        print("warning: a restart can fail to form its process group; run torchrun with --standalone "
              "and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (see this script's docstring)", file=sys.stderr, flush=True)
    dist.init_process_group("gloo")  # reads the variables torchrun set
    torch.set_num_threads(1)
    try:
        state, start = train(args, attempt)
        identical = digits_ddp.same_parameters_on_every_rank(state)
        if dist.get_rank() == 0:
            if args.final:
                save_atomically(state["model"], args.final)
            print(f"attempt {attempt}: resumed from step {start}, ran {args.steps - start} steps, "
                  f"finished at step {args.steps}, replicas identical: {identical}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
