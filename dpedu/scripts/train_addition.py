"""Train a small GPT to add multi-digit numbers with DistributedDataParallel: the script lesson 13 runs.

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
bar and logs on rank 0 only (none when DPEDU_QUIET=1): the global training loss (all ranks' mean), tokens per
second and MFU, the model's FLOPs (6 N + 12 L d T per token) over the ranks' peak (one rank's matmul peak,
measured at the start by rank 0; dpedu.training_run.flops), also in the summary; atomic checkpoints holding
everything a resumed run needs to continue bit for bit (shown on CPUs with gloo; unchecked on GPUs, whose
kernels need not be deterministic), resumed only by the same run (the same settings, precision and device
type); held-out exact-match accuracy evaluated on unpadded shards and summed, at the end and every
--eval-every steps (dropout back on after each); with --noise-scale, every step's squared gradient norms, each
rank's and the averaged one, read by a communication hook on DDP's all-reduce (the gradient noise scale),
except on float16 steps GradScaler skipped (listed).
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
from dpedu.training_run.addition import VOCABULARY, Splits, addition_splits, sequence_length
from dpedu.training_run.batches import epoch_batches, micro_batch_size, steps_per_epoch
from dpedu.training_run.evaluation import distributed_exact_match
from dpedu.training_run.flops import mfu, peak_flops, training_flops_per_token
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
        os.environ.update(BF16_ENV)  # before the first matmul: oneDNN must not pick AMX (lesson 11 says why)
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
    micro = micro_batch_size(args.global_batch, world, args.accumulate)  # names --global-batch when not whole
    data = addition_splits(args.digits, train=args.train_examples, heldout=args.heldout_examples,
                           seed=args.data_seed)
    per_epoch = steps_per_epoch(len(data.train), args.global_batch)
    length = sequence_length(args.digits) - 1  # the tokens the model reads: all but the last, only predicted
    torch.manual_seed(args.seed)  # the same initial model on every rank (DDP broadcasts rank 0's anyway)
    model = GPT(len(VOCABULARY), length, width=args.width, heads=args.heads, layers=args.layers,
                dropout=args.dropout).to(device)
    torch.manual_seed(args.seed + 1 + rank)  # dropout: different draws on every rank
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=args.weight_decay)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "float16")
    sampler = DistributedSampler(data.train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    checkpoints = Checkpoints(args, precision, device, per_epoch, model, optimizer, scaler)
    start, losses, evaluations = checkpoints.resume() if args.resume else (0, [], [])  # evaluations: (step, accuracy)
    dist.barrier()  # every rank has read the checkpoint before rank 0 may write the next one
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    record = StepRecord(ddp, scaler, losses, noise_scale=args.noise_scale)
    flops_per_token = training_flops_per_token(model, length)  # 6 N + 12 L d T: Kaplan et al., PaLM
    peak = shared_peak(device, precision)  # one rank's FLOP/s, measured; the run's MFU is against world x peak
    tokens = args.global_batch * length  # per step
    log = Log(args, start, tokens, flops_per_token, world * peak)

    step, stop = start, last_step(args, start)
    training_started = time.perf_counter()
    while step < stop:
        epoch, position = divmod(step, per_epoch)
        for micro_batches in epoch_batches(data.train, sampler, epoch, micro_batch=micro,
                                           accumulate=args.accumulate, first_step=position,
                                           num_workers=args.num_workers):
            lr = learning_rate(step, peak=args.lr, warmup=args.warmup, total=args.steps, final=args.final_lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            record.start_step()
            loss = train_step(ddp, micro_batches, optimizer, scaler, digits=args.digits, clip=args.clip,
                              precision=precision)
            step += 1
            record.end_step(step, loss)  # this rank's loss; with --noise-scale, the norms DDP's all-reduce passed
            log.update()
            if step % args.log_every == 0 or step == stop:
                log.line(step, record.reduce()[-1], lr)  # one all-reduce: the global losses since the last line
            if args.eval_every and step % args.eval_every == 0 and step < args.steps:  # the last one comes below
                evaluations.append((step, heldout_accuracy(model, data)))
                log.evaluation(*evaluations[-1])
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                checkpoints.save(step, record.reduce(), evaluations)
            if step == stop:
                break
    log.close()
    training_seconds = time.perf_counter() - training_started
    if stop < args.steps:  # --stop-after-step: as if killed here, after the checkpoints so far
        return {"stopped_after_step": stop, "checkpoint_step": stop - stop % args.checkpoint_every
                if args.checkpoint_every else None} if rank == 0 else None
    losses = record.reduce()
    if args.checkpoint:
        checkpoints.save(step, losses, evaluations)
    correct, examples = distributed_exact_match(model, data.heldout, args.digits)
    evaluations.append((args.steps, correct / examples))
    identical = replicas.replicas_identical(model)
    if rank != 0:
        return None
    tokens_per_second = (args.steps - start) * tokens / training_seconds
    return record.noise_summary(micro * args.accumulate, args.global_batch) | {
        "world_size": world, "backend": dist.get_backend(), "device": device.type, "precision": precision,
        "parameters": model.parameter_count(), "steps": args.steps, "resumed_from_step": start,
        "global_batch": args.global_batch, "micro_batch": micro, "accumulate": args.accumulate,
        "steps_per_epoch": per_epoch, "losses": losses, "heldout_correct": correct, "heldout_examples": examples,
        "heldout_accuracy": correct / examples, "heldout_curve": evaluations,
        "checksum": replicas.parameter_checksum(model), "replicas_identical": identical,
        "samples_per_second": (args.steps - start) * args.global_batch / training_seconds,
        "tokens_per_second": tokens_per_second, "flops_per_token": flops_per_token, "peak_flops": peak,
        "mfu": mfu(tokens_per_second, flops_per_token, world * peak),
        "training_seconds": training_seconds, "elapsed_seconds": time.perf_counter() - started}


# The instruments, out of the loop's way.

def last_step(args: argparse.Namespace, start: int) -> int:
    """The step the run stops after: --steps, or --stop-after-step (a test's hook: stop as if killed there)."""
    if args.stop_after_step is not None and args.stop_after_step > start:
        return args.stop_after_step
    return args.steps


def heldout_accuracy(model: torch.nn.Module, data: Splits) -> float:
    """Held-out exact match, every rank on its unpadded shard, counts summed; dropout back on after (evaluating)."""
    correct, examples = distributed_exact_match(model, data.heldout, data.digits)
    return correct / examples


def shared_peak(device: torch.device, precision: str) -> float:
    """One rank's peak FLOP/s in the run's precision, measured by rank 0 while the others wait, then sent to all.

    Measured alone, as one rank's device would compute with the others idle: ranks measuring at once on shared
    cores would each measure their share, and an MFU against it would hide what sharing the cores costs. Every
    rank gets the same number, so every rank computes the same MFU (on GPUs: alike GPUs assumed)."""
    peak = torch.zeros((), dtype=torch.float64)  # on the CPU: gloo sends it, also beside nccl
    if dist.get_rank() == 0:
        peak.fill_(peak_flops(device, getattr(torch, precision)))
    dist.broadcast(peak, src=0)
    return peak.item()


class StepRecord:
    """What every step leaves: this rank's loss, and with --noise-scale the squared gradient norms, this rank's
    and the averaged one, read by a communication hook on DDP's own all-reduce (the gradient noise scale),
    except on float16 steps GradScaler skipped (listed). Each rank keeps its numbers until ``reduce``: one
    all-reduce for many steps turns them into the ranks' means (the global batch's loss)."""

    def __init__(self, ddp: DDP, scaler: torch.amp.GradScaler, losses: list[float], *, noise_scale: bool) -> None:
        self.scaler, self.noise_scale, self.scale = scaler, noise_scale, 1.0
        self.losses, self.pending = losses, []  # the global losses so far; this rank's since the last reduce
        self.norms, self.local_sq, self.pending_sq, self.global_sq, self.skipped = GradientNorms(), [], [], [], []
        if noise_scale:
            ddp.register_comm_hook(self.norms, recording_allreduce_hook)  # DDP's all-reduce, norms read on the way

    def start_step(self) -> None:
        self.norms.reset()
        self.scale = self.scaler.get_scale() if self.noise_scale and self.scaler.is_enabled() else 1.0  # before step()

    def end_step(self, step: int, loss: torch.Tensor) -> None:
        self.pending.append(loss)
        if self.noise_scale:  # the hook saw scaled gradients: unscaled divides their norms by scale^2
            unscaled = self.norms.unscaled(self.scale)
            if unscaled is None:  # inf or nan: float16 overflowed and GradScaler skipped the step (every rank)
                self.skipped.append(step)
            else:
                self.pending_sq.append(unscaled[0])
                self.global_sq.append(unscaled[1])

    def reduce(self) -> list[float]:
        """Every rank calls it (a collective); returns the global losses of every step so far."""
        for pending, reduced in ((self.pending, self.losses), (self.pending_sq, self.local_sq)):
            if pending:  # the ranks' mean of each step's loss, and of each step's |g_b|^2
                reduced.extend(replicas.global_mean(torch.stack(pending)).tolist())
                pending.clear()
        return self.losses

    def noise_summary(self, per_rank_examples: int, global_batch: int) -> dict:
        if not self.noise_scale:
            return {}
        return {"noise_scale": {"per_rank_examples": per_rank_examples, "global_batch": global_batch,
                                "local_sq": self.local_sq, "global_sq": self.global_sq,
                                "skipped_steps": self.skipped}}


class Checkpoints:
    """--checkpoint: everything a resumed run needs to continue bit for bit, written atomically by rank 0."""

    def __init__(self, args: argparse.Namespace, precision: str, device: torch.device, per_epoch: int,
                 model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> None:
        self.path, self.per_epoch, self.model, self.optimizer, self.scaler = \
            args.checkpoint, per_epoch, model, optimizer, scaler
        # Precision and device are part of the run: float16 or not decides whether the checkpoint holds a
        # GradScaler's state, and a CPU rank cannot continue a GPU's random streams.
        self.settings = {name: getattr(args, name) for name in RUN_SETTINGS} | {"precision": precision,
                                                                                "device": device.type}

    def resume(self) -> tuple[int, list[float], list[tuple[int, float]]]:
        """Model, optimizer, scaler and this rank's random state restored; returns the step the checkpoint's run
        had reached, its global losses and its held-out evaluations."""
        # On the CPU: torch.set_rng_state takes a CPU tensor; load_state_dict moves the rest to the model's device.
        state = load_checkpoint(self.path, map_location="cpu")
        if state is None:
            raise SystemExit(f"--resume: there is no checkpoint at {self.path!r} to resume from")
        # Before scaler.load_state_dict, whose own error would not say why. A checkpoint written before precision
        # and device were recorded says "not recorded" for them: refused too, it may be float16's or bfloat16's.
        if state["settings"] != self.settings:
            changed = "; ".join(f"{name}: {state['settings'].get(name, 'not recorded')} in the checkpoint, {value} here"
                                for name, value in self.settings.items() if state["settings"].get(name) != value)
            raise SystemExit(f"--resume: the checkpoint is of another run (different {changed}): resume with its "
                             "settings, or start afresh without --resume")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        replicas.restore_random_states(state["random_states"])  # names the world size the checkpoint needs
        assert (state["epoch"], state["position"]) == divmod(state["step"], self.per_epoch)
        return state["step"], list(state["losses"]), list(state["evaluations"])

    def save(self, step: int, losses: list[float], evaluations: list[tuple[int, float]]) -> None:
        """Every rank calls it (a collective); returns when the checkpoint is on disk."""
        states = replicas.random_states()
        if dist.get_rank() == 0:
            epoch, position = divmod(step, self.per_epoch)  # a resumed run starts at this batch of this epoch
            save_atomically({"step": step, "epoch": epoch, "position": position, "settings": self.settings,
                             "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                             "scaler": self.scaler.state_dict(), "random_states": states, "losses": losses,
                             "evaluations": evaluations}, self.path)
        dist.barrier()  # no rank goes on before the checkpoint is on disk


class Log:
    """Rank 0's progress bar (stderr) and log lines (stdout, above the bar), none with DPEDU_QUIET=1. Every
    --log-every steps: the global loss, the learning rate, and since the last line tokens per second and MFU,
    as nanoGPT and picotron print them (rank 0's clock, evaluations and checkpoints included: a step ends with
    the all-reduce, so the ranks keep pace); every --eval-every steps, held-out exact match."""

    def __init__(self, args: argparse.Namespace, start: int, tokens_per_step: int, flops_per_token: int,
                 peak: float) -> None:
        self.quiet = dist.get_rank() != 0 or os.environ.get("DPEDU_QUIET") == "1"
        self.steps, self.tokens_per_step, self.flops_per_token, self.peak = \
            args.steps, tokens_per_step, flops_per_token, peak
        self.bar = tqdm(total=args.steps, initial=start, desc=f"{dist.get_world_size()} rank(s)", disable=self.quiet,
                        file=sys.stderr)
        self.since = (start, time.perf_counter())

    def update(self) -> None:
        self.bar.update()

    def line(self, step: int, loss: float, lr: float) -> None:
        (then, started), now = self.since, time.perf_counter()
        self.since = (step, now)
        tokens_per_second = (step - then) * self.tokens_per_step / (now - started)
        self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.1e}")
        self.write(f"step {step}/{self.steps}: global loss {loss:.4f}, lr {lr:.2e}, {tokens_per_second:,.0f} tokens/s, "
                   f"MFU {mfu(tokens_per_second, self.flops_per_token, self.peak):.1%}")

    def evaluation(self, step: int, accuracy: float) -> None:
        self.write(f"step {step}/{self.steps}: held-out exact match {accuracy:.3f}")

    def write(self, line: str) -> None:
        if not self.quiet:  # on stdout, above the bar (on stderr)
            tqdm.write(line, file=sys.stdout)

    def close(self) -> None:
        self.bar.close()


if __name__ == "__main__":
    main()
