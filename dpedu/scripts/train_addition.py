"""Train a small GPT to add multi-digit numbers with DistributedDataParallel: the script lesson 11 runs.

One machine, CPUs (gloo) or one GPU per rank (nccl), any number of ranks, the same global batch:
    torchrun --standalone --nproc-per-node=2 -m dpedu.scripts.train_addition --steps 1000 --global-batch 64
Checkpoints every 250 steps; stop as if killed after step 600; then resume, mid-epoch, from step 500:
    torchrun --standalone --nproc-per-node=2 -m dpedu.scripts.train_addition \\
        --checkpoint ckpt.pt --checkpoint-every 250 --stop-after-step 600
    torchrun --standalone --nproc-per-node=2 -m dpedu.scripts.train_addition \\
        --checkpoint ckpt.pt --checkpoint-every 250 --resume

What it uses, each for real: DistributedSampler with set_epoch; gradient accumulation under no_sync
(--accumulate K: each rank runs K micro-batches of --global-batch / (ranks x K) examples per step); warmup +
cosine learning rate per optimizer step of the global batch; clipping of the averaged gradient; float16
autocast with a GradScaler on GPUs, float32 on CPUs (bfloat16 on request: --precision bfloat16); a progress
bar and logs on rank 0 only (none when DPEDU_QUIET=1); the global training loss (all ranks' mean);
atomic checkpoints holding everything a resumed run needs to continue bit for bit (shown on CPUs with gloo;
unchecked on GPUs, whose kernels need not be deterministic), resumed only by the same run (the same settings,
precision and device type); held-out exact-match accuracy evaluated on unpadded shards and summed, at the end
and every --eval-every steps (dropout back on after each); with --noise-scale, every step's squared gradient
norms, each rank's and the averaged one, read by a communication hook on DDP's all-reduce (the gradient noise
scale), except on float16 steps GradScaler skipped (listed).
Rank 0 prints a JSON summary as the last line of its output (and writes it to --summary).

When every process on a machine can have a GPU of its own, each uses its own; otherwise all run on the
CPU (ranks must agree). CUDA_VISIBLE_DEVICES="" keeps a GPU machine on the CPU.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch._dynamo  # noqa: F401 - before any process group exists: the note in dpedu/data_parallel/digits_ddp.py
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

from dpedu.beyond.mixed_precision import BF16_ENV
from dpedu.cluster.checkpoints import load_checkpoint, save_atomically
from dpedu.runtime.gpus import one_gpu_per_local_rank
from dpedu.training_run import replicas
from dpedu.training_run.addition import VOCABULARY, addition_splits, sequence_length
from dpedu.training_run.batches import epoch_batches, micro_batch_size, steps_per_epoch
from dpedu.training_run.evaluation import distributed_exact_match
from dpedu.training_run.gpt import GPT
from dpedu.training_run.gradient_norms import GradientNorms, recording_allreduce_hook
from dpedu.training_run.schedule import learning_rate
from dpedu.training_run.step import PRECISIONS, resolve_precision, train_step

# The settings that define the run's arithmetic: a checkpoint resumes only a run with the same ones, and with
# the same precision (auto resolved) and device type, which `train` adds.
RUN_SETTINGS = ("digits", "train_examples", "heldout_examples", "data_seed", "width", "heads", "layers", "dropout",
                "steps", "global_batch", "accumulate", "lr", "warmup", "final_lr", "weight_decay", "clip", "seed")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--digits", type=int, default=2, help="digits of each number added (1 to 3)")
    add("--train-examples", type=int, default=8000)
    add("--heldout-examples", type=int, default=1000)
    add("--data-seed", type=int, default=0, help="which pairs go to the training and held-out sets")
    add("--width", type=int, default=64)
    add("--heads", type=int, default=4)
    add("--layers", type=int, default=2)
    add("--dropout", type=float, default=0.0)
    add("--steps", type=int, default=1000, help="optimizer steps in the whole run")
    add("--global-batch", type=int, default=64, help="examples per optimizer step, over all ranks")
    add("--accumulate", type=int, default=1, help="micro-batches per rank per step (gradient accumulation)")
    add("--lr", type=float, default=3e-3, help="peak learning rate, for the global batch")
    add("--warmup", type=int, default=100, help="steps of linear warmup")
    add("--final-lr", type=float, default=0.1, help="the last step's learning rate, as a fraction of --lr")
    add("--weight-decay", type=float, default=0.0)
    add("--clip", type=float, default=1.0, help="largest norm of the averaged gradient")
    add("--precision", choices=PRECISIONS, default="auto",
        help="auto: float16 + GradScaler on GPUs, float32 on CPUs")
    add("--seed", type=int, default=0, help="the model's initialisation, the data order, dropout")
    add("--num-workers", type=int, default=0, help="DataLoader worker processes per rank")
    add("--checkpoint", help="file every rank can read; rank 0 writes it atomically")
    add("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: only at the end)")
    add("--resume", action="store_true",
        help="continue from --checkpoint (it must exist, written with the same settings, precision and device type)")
    add("--stop-after-step", type=int,
        help="stop after this step as if killed: no final checkpoint; the summary says only where it stopped")
    add("--log-every", type=int, default=50, help="steps between rank 0's log lines (and global-loss reductions)")
    add("--eval-every", type=int, default=0,
        help="steps between held-out exact-match evaluations during training (0: only at the end); a resumed run "
             "keeps the evaluations before its checkpoint, so resume with the same value for an even curve")
    add("--summary", help="where rank 0 writes the JSON summary (it always prints it)")
    add("--noise-scale", action="store_true",
        help="record every step's squared gradient norms, each rank's and the averaged one, for the gradient noise "
             "scale (in the summary; the steps this process ran, but float16 steps whose gradients overflowed, "
             "which GradScaler skipped: their numbers are listed)")
    args = parser.parse_args(argv)
    positive = ("digits", "train_examples", "heldout_examples", "width", "heads", "layers", "steps", "global_batch",
                "accumulate", "log_every")
    for name in positive:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("num_workers", "checkpoint_every", "eval_every", "warmup"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.warmup >= args.steps:
        parser.error(f"--warmup must be smaller than --steps, got {args.warmup} >= {args.steps}")
    if not (args.lr > 0 and args.clip > 0 and 0 <= args.final_lr <= 1 and args.weight_decay >= 0):
        parser.error("--lr and --clip must be > 0, --final-lr in [0, 1], --weight-decay >= 0")
    if (args.resume or args.checkpoint_every) and not args.checkpoint:
        parser.error("--resume and --checkpoint-every need --checkpoint FILE")
    if args.stop_after_step is not None and not 1 <= args.stop_after_step < args.steps:
        parser.error(f"--stop-after-step must be from 1 to --steps - 1 = {args.steps - 1}")
    return args


def main() -> None:
    started = time.perf_counter()
    args = arguments()
    local_rank = int(os.environ["LOCAL_RANK"])
    gpus = one_gpu_per_local_rank(local_rank, int(os.environ["LOCAL_WORLD_SIZE"]), "train_addition")
    device = torch.device("cuda", local_rank) if gpus else torch.device("cpu")
    precision = resolve_precision(args.precision, device)  # a bad choice fails here, before any rank waits
    if precision == "bfloat16" and device.type == "cpu":
        os.environ.update(BF16_ENV)  # before the first matmul: oneDNN must not pick AMX (lesson 09 says why)
    if gpus:
        torch.cuda.set_device(device)
    # nccl moves CUDA tensors; gloo keeps CPU collectives (the random states' all-gather) working beside it.
    dist.init_process_group("cpu:gloo,cuda:nccl" if gpus else "gloo")  # reads the variables torchrun set
    # One thread per rank unless OMP_NUM_THREADS says otherwise (torchrun sets 1 only for 2 ranks or more):
    # runs on 1, 2 and 4 ranks then compare at the same threads per rank.
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        summary = train(args, device, precision, started)
    finally:
        dist.destroy_process_group()
    if summary is not None:  # rank 0
        line = json.dumps(summary)
        if args.summary:
            with open(args.summary, "w") as file:
                file.write(line + "\n")
        print(line, flush=True)


def train(args: argparse.Namespace, device: torch.device, precision: str, started: float) -> dict | None:
    """The whole run on this rank; rank 0 returns the summary, the other ranks None."""
    rank, world = dist.get_rank(), dist.get_world_size()
    quiet = rank != 0 or os.environ.get("DPEDU_QUIET") == "1"
    micro = micro_batch_size(args.global_batch, world, args.accumulate)  # names --global-batch when not whole
    data = addition_splits(args.digits, train=args.train_examples, heldout=args.heldout_examples,
                           seed=args.data_seed)
    per_epoch = steps_per_epoch(len(data.train), args.global_batch)
    torch.manual_seed(args.seed)  # the same initial model on every rank (DDP broadcasts rank 0's anyway)
    model = GPT(len(VOCABULARY), sequence_length(args.digits) - 1, width=args.width, heads=args.heads,
                layers=args.layers, dropout=args.dropout).to(device)
    torch.manual_seed(args.seed + 1 + rank)  # dropout: different draws on every rank
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "float16")
    # Precision and device are part of the run: float16 or not decides whether the checkpoint holds a GradScaler's
    # state, and a CPU rank cannot continue a GPU's random streams.
    settings = {name: getattr(args, name) for name in RUN_SETTINGS} | {"precision": precision, "device": device.type}
    sampler = DistributedSampler(data.train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)

    start, losses, evaluations = 0, [], []  # evaluations: (step, held-out exact match), --eval-every
    if args.resume:
        # On the CPU: torch.set_rng_state takes a CPU tensor; load_state_dict moves the rest to the model's device.
        state = load_checkpoint(args.checkpoint, map_location="cpu")
        if state is None:
            raise SystemExit(f"--resume: there is no checkpoint at {args.checkpoint!r} to resume from")
        # Before scaler.load_state_dict, whose own error would not say why. A checkpoint written before precision
        # and device were recorded says "not recorded" for them: refused too, it may be float16's or bfloat16's.
        if state["settings"] != settings:
            changed = "; ".join(f"{name}: {state['settings'].get(name, 'not recorded')} in the checkpoint, {value} here"
                                for name, value in settings.items() if state["settings"].get(name) != value)
            raise SystemExit(f"--resume: the checkpoint is of another run (different {changed}): resume with its "
                             "settings, or start afresh without --resume")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        replicas.restore_random_states(state["random_states"])  # names the world size the checkpoint needs
        start, losses, evaluations = state["step"], list(state["losses"]), list(state["evaluations"])
        assert (state["epoch"], state["position"]) == divmod(start, per_epoch)
    dist.barrier()  # every rank has read the checkpoint before rank 0 may write the next one
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    norms, local_sq, global_sq = GradientNorms(), [], []  # --noise-scale: this rank's and the averaged |g|^2
    skipped = []  # --noise-scale: the steps GradScaler skipped (float16 overflowed), left out of the record
    if args.noise_scale:
        ddp.register_comm_hook(norms, recording_allreduce_hook)  # DDP's own all-reduce, norms read on the way

    def save(step: int) -> None:
        states = replicas.random_states()  # a collective: every rank calls it
        if rank == 0:
            epoch, position = divmod(step, per_epoch)  # a resumed run starts at this batch of this epoch
            save_atomically({"step": step, "epoch": epoch, "position": position, "settings": settings,
                             "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "scaler": scaler.state_dict(), "random_states": states, "losses": losses,
                             "evaluations": evaluations}, args.checkpoint)
        dist.barrier()  # no rank goes on before the checkpoint is on disk

    def heldout_accuracy() -> float:  # every rank its unpadded shard; dropout back on after (evaluating)
        correct, examples = distributed_exact_match(model, data.heldout, args.digits)
        return correct / examples

    bar = tqdm(total=args.steps, initial=start, desc=f"{world} rank(s)", disable=quiet, file=sys.stderr)
    pending: list[torch.Tensor] = []  # this rank's losses since the last reduction
    pending_sq: list[torch.Tensor] = []  # --noise-scale: this rank's squared gradient norms since then

    def reduce_losses() -> None:
        if pending:  # one all-reduce for many steps: the global batch's mean loss of each
            losses.extend(replicas.global_mean(torch.stack(pending)).tolist())
            pending.clear()
        if pending_sq:  # the ranks' mean of |g_b|^2, step by step
            local_sq.extend(replicas.global_mean(torch.stack(pending_sq)).tolist())
            pending_sq.clear()

    step, stop = start, args.stop_after_step if args.stop_after_step is not None and args.stop_after_step > start \
        else args.steps
    training_started = time.perf_counter()
    while step < stop:
        epoch, position = divmod(step, per_epoch)
        for micro_batches in epoch_batches(data.train, sampler, epoch, micro_batch=micro,
                                           accumulate=args.accumulate, first_step=position,
                                           num_workers=args.num_workers):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, peak=args.lr, warmup=args.warmup, total=args.steps,
                                            final=args.final_lr)
            norms.reset()
            scale = scaler.get_scale() if args.noise_scale and scaler.is_enabled() else 1.0  # before step() updates it
            pending.append(train_step(ddp, micro_batches, optimizer, scaler, digits=args.digits, clip=args.clip,
                                      precision=precision))
            if args.noise_scale:  # the hook saw scaled gradients: unscaled divides their norms by scale^2
                unscaled = norms.unscaled(scale)
                if unscaled is None:  # inf or nan: float16 overflowed and GradScaler skipped the step (every rank)
                    skipped.append(step + 1)
                else:
                    pending_sq.append(unscaled[0])
                    global_sq.append(unscaled[1])
            step += 1
            bar.update()
            if step % args.log_every == 0 or step == stop:
                reduce_losses()
                lr = optimizer.param_groups[0]["lr"]
                bar.set_postfix(loss=f"{losses[-1]:.3f}", lr=f"{lr:.1e}")
                if not quiet:  # rank 0's log, on stdout, above the bar (on stderr)
                    tqdm.write(f"step {step}/{args.steps}: global loss {losses[-1]:.4f}, lr {lr:.2e}", file=sys.stdout)
            if args.eval_every and step % args.eval_every == 0 and step < args.steps:  # the last one comes below
                evaluations.append((step, heldout_accuracy()))
                if not quiet:
                    tqdm.write(f"step {step}/{args.steps}: held-out exact match {evaluations[-1][1]:.3f}",
                               file=sys.stdout)
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                reduce_losses()
                save(step)
            if step == stop:
                break
    bar.close()
    training_seconds = time.perf_counter() - training_started
    if stop < args.steps:  # --stop-after-step: as if killed here, after the checkpoints so far
        return {"stopped_after_step": stop, "checkpoint_step": stop - stop % args.checkpoint_every
                if args.checkpoint_every else None} if rank == 0 else None
    reduce_losses()
    if args.checkpoint:
        save(step)
    correct, examples = distributed_exact_match(model, data.heldout, args.digits)
    evaluations.append((args.steps, correct / examples))
    identical = replicas.replicas_identical(model)
    if rank != 0:
        return None
    noise = {"noise_scale": {"per_rank_examples": micro * args.accumulate, "global_batch": args.global_batch,
                             "local_sq": local_sq, "global_sq": global_sq,
                             "skipped_steps": skipped}} if args.noise_scale else {}
    return noise | {"world_size": world, "backend": dist.get_backend(), "device": device.type,
            "precision": precision, "parameters": model.parameter_count(), "steps": args.steps,
            "resumed_from_step": start, "global_batch": args.global_batch, "micro_batch": micro,
            "accumulate": args.accumulate, "steps_per_epoch": per_epoch, "losses": losses,
            "heldout_correct": correct, "heldout_examples": examples, "heldout_accuracy": correct / examples,
            "heldout_curve": evaluations,
            "checksum": replicas.parameter_checksum(model), "replicas_identical": identical,
            "samples_per_second": (args.steps - start) * args.global_batch / training_seconds,
            "training_seconds": training_seconds, "elapsed_seconds": time.perf_counter() - started}


if __name__ == "__main__":
    main()
