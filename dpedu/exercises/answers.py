"""Model answers and rubrics for the exercises at the end of lessons 00 to 14, printed only on request.

``answer(lesson)`` lists a lesson's exercises and the kind of answer each has; ``answer(lesson, n)`` prints
exercise n's. A lesson studied in two sittings numbers its exercises on from the first to the second:
lesson 08's 1 to 4 are 08a's, its 5 is 08b's. The kinds: a **computed value** (a number or a formula that
the lesson's checker accepts), **code** (a function of this module, printed from its source, that the checker
accepts) and a **rubric** (what a good answer to an open question must contain, with the numbers the learner
should find); some have a value and a rubric. The texts live here, not in the notebooks, so that nobody meets
an answer by accident: no lesson imports this module; learners and teachers call it.
``tests/exercises/test_answers.py`` feeds every value in ``VALUES`` and every code answer to its lesson's
checker. Figures introduced as "measured" were measured on a 2-core CPU by running what the exercise asks;
timings differ from machine to machine.
"""

from __future__ import annotations

import inspect

import torch
import torch.distributed as dist
from torch import nn

from dpedu._validate import whole

# The model answers that the lessons' checkers accept, by (lesson, exercise); the texts below quote them.
VALUES: dict[tuple[int, int], object] = {
    (0, 2): {"PRODUCT": 24.0, "MAX": 4.0},
    (0, 4): [0, 1],
    (1, 1): 0.2462,
    (1, 2): 4.155,
    (1, 3): 0.0477,
    (2, 2): [200 / 256, 56 / 256],
    (2, 3): 8,
    (2, 4): False,
    (3, 1): {"drop_last=False": 3, "drop_last=True": 2},
    (3, 2): {"no_sync=False": 15, "no_sync=True": 5},
    (3, 3): 0.001,
    (4, 3): 183_500_800,
    (5, 1): {"MiniDDP": 4, "torch DDP": 2},
    (5, 3): 22_937_600,
    (5, 4): 512.0,
    (6, 1): 0.1113,
    (6, 2): 2.083,
    (6, 3): 15.0,
    (6, 5): 0.5,
    (6, 6): 4 * 150_000_000 * (10_000 // 500),
    (7, 1): 0.8,
    (7, 2): 500,
    (7, 3): 0.0306,
    (8, 1): 6,
    (8, 2): 20,
    (8, 5): {"sampler": True, "dropout": False},
    (8, 6): {"seed + worker_id": 2, "seed + rank + worker_id": 5, "seed + rank * num_workers + worker_id": 8},
    (9, 1): 19,
    (9, 3): 4.13,
    (9, 4): 1.0 / (2 * 7 / 8 * 4 / 1.25e9),
    (9, 5): "torchrun --nnodes=4 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=node1:29400 --rdzv-id=job42 "
            "-m dpedu.scripts.train_ddp",
    (10, 3): {"80 on 1, 2, 4 workers": {1: 17, 2: 17, 4: 18}, "one batch for 1 to 4 workers": 84},
    (10, 4): 86.2,
    (10, 5): ["a wrong MASTER_ADDR", "an unused parameter", "a skipped collective", "a wrong network interface",
              "mismatched shapes", "a port in use", "mismatched collectives"],
    (11, 1): 37.375,
    (11, 2): {3e-8: True, 2e-8: False},
    (11, 3): 578,
    (11, 4): 15.0,
    (11, 5): 12 * 512 * 128 * 4,
    (12, 1): {8: 3 / 11, 16: 3 / 19, "fewest micro-batches under 10 %": 28},
    (12, 2): {"1f1b": 3, "gpipe": 8},
    (12, 5): {"tensor_parallel": 4, "pipeline_parallel": 1, "zero_stage": 2},
    (12, 6): {"tensor": [4, 5, 6, 7], "data": [2, 6]},
    (13, 1): 16,
    (13, 2): 8,
    (13, 3): 3e-3 * 51 / 100,
    (13, 5): {"flops_per_token": 6 * 85_000_000 + 12 * 12 * 768 * 1024,
              "mfu": 1.5e6 * (6 * 85_000_000 + 12 * 12 * 768 * 1024) / (8 * 312e12)},
    (13, 6): [5, 17, 29],
    (13, 7): {64: 0.3 / (64 * 0.05 + 0.3), 4: 0.3 / (4 * 0.05 + 0.3)},
    (14, 1): 8 * 4 * 3,
    (14, 2): {"gather": 400, "gather_for_metrics": 359},
    (14, 3): 0.1 / 4,
}


def sum_of_rank_plus_one(n: int) -> float:
    """Lesson 00, exercise 1: 1 + 2 + ... + n, what every rank holds after all-reducing rank + 1."""
    return n * (n + 1) / 2


def ring_bytes(workers: int, gradient_bytes: int) -> float:
    """Lesson 02, exercise 1: K - 1 steps of reduce-scatter and K - 1 of all-gather, a K-th each."""
    return 2 * (workers - 1) / workers * gradient_bytes


def tree_all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """Lesson 04, exercise 1: a binomial tree of send/recv. Sums ``tensor`` over the ranks, in place."""
    rank, world = dist.get_rank(), dist.get_world_size()
    top = 1
    while top < world:  # the tree's height: the smallest power of 2 that is at least world
        top *= 2
    incoming, distance = torch.empty_like(tensor), 1
    while distance < top:  # up: at each distance, the odd partner sends its partial sum and is done
        if rank % (2 * distance) == distance:
            dist.send(tensor, rank - distance)
            break
        if rank + distance < world:
            dist.recv(incoming, rank + distance)
            tensor += incoming
        distance *= 2
    distance = top
    while distance > 1:  # down: the same pairs in reverse order; rank 0 starts with the whole sum
        distance //= 2
        if rank % (2 * distance) == 0 and rank + distance < world:
            dist.send(tensor, rank + distance)
        elif rank % (2 * distance) == distance:
            dist.recv(tensor, rank - distance)
    return tensor


def ring_all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """Lesson 04, exercise 2: p - 1 steps round a ring of isend/irecv. Row r of the result is rank r's tensor."""
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = torch.empty(world, *tensor.shape, dtype=tensor.dtype)
    rows[rank] = tensor
    for step in range(world - 1):  # pass on the row that arrived in the last step
        sending, arriving = (rank - step) % world, (rank - step - 1) % world
        requests = [dist.isend(rows[sending].contiguous(), (rank + 1) % world),
                    dist.irecv(rows[arriving], (rank - 1) % world)]
        for request in requests:  # both posted before either waits: no rank blocks sending (part 1)
            request.wait()
    return rows


def ring_seconds(nbytes: float, alpha: float, beta: float, world_size: int) -> float:
    """Lesson 04, exercise 4: 2(p - 1) steps pay α each; each rank sends 2(p - 1)/p · n bytes at β each."""
    return 2 * (world_size - 1) * alpha + 2 * (world_size - 1) / world_size * nbytes * beta


def my_rank_and_size(environ: dict[str, str]) -> tuple[int, int]:
    """Lesson 09, exercise 2: (rank, world size) from the launcher's variables, torchrun's first."""
    for rank, size in (("RANK", "WORLD_SIZE"),  # first: torchrun inside srun also sees SLURM_PROCID
                       ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI
                       ("PMI_RANK", "PMI_SIZE"),  # MPICH (and Intel MPI)
                       ("SLURM_PROCID", "SLURM_NTASKS")):  # srun
        if rank in environ:
            return int(environ[rank]), int(environ[size])
    raise KeyError("no launcher's rank variables in this environment")


class GhostBatchNorm2d(nn.BatchNorm2d):
    """Lesson 08, exercise 3 (in 08a): BatchNorm that normalises each of ``chunks`` parts of the batch on its own.

    ``interleaved=True`` takes examples i, i + chunks, i + 2·chunks, ... as chunk i: what rank i of
    ``chunks`` ranks holds of a global batch dealt out by ``DistributedSampler``.
    """

    def __init__(self, features: int, chunks: int = 2, interleaved: bool = False):
        super().__init__(features)
        self.chunks, self.interleaved = chunks, interleaved

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        norm = super().forward
        if self.interleaved:  # equal chunks: the batch must divide by ``chunks``
            return torch.stack([norm(x[i::self.chunks]) for i in range(self.chunks)], 1).flatten(0, 1)
        return torch.cat([norm(part) for part in x.tensor_split(self.chunks)])


CODE = {(0, 1): sum_of_rank_plus_one, (2, 1): ring_bytes, (4, 1): tree_all_reduce, (4, 2): ring_all_gather,
        (4, 4): ring_seconds, (8, 3): GhostBatchNorm2d, (9, 2): my_rank_and_size}


VALUE, CODE_KIND, RUBRIC = "computed value", "code", "rubric"

# (lesson, exercise) -> (kind, text). "computed value + rubric": a checked value and a question to discuss.
TEXTS: dict[tuple[int, int], tuple[str, str]] = {
    (0, 1): (CODE_KIND, """
Every rank holds 1 + 2 + ... + n = n(n + 1)/2 (the lesson's "A first launch" asserts it for n = 1 to 4).
Check: lesson00.sum_formula(sum_of_rank_plus_one), or lesson00.sum_formula(lambda n: n * (n + 1) / 2)."""),
    (0, 2): (VALUE, f"""
PRODUCT over 4 ranks: 1 · 2 · 3 · 4 = {VALUES[0, 2]['PRODUCT']:g} (n! on n ranks); MAX: {VALUES[0, 2]['MAX']:g} (n).
Check: lesson00.predict("PRODUCT", 4, 24.0) and lesson00.predict("MAX", 4, 4.0)."""),
    (0, 3): (RUBRIC, """
The change: keep dist.all_reduce on every rank and put only the print under `if rank == 0:`; a collective
inside the `if` would leave the other ranks waiting ("When a rank fails, or hangs"). A good answer on why:
- every rank runs the same script, so each message appears world_size times (8 GPUs × 64 nodes: 512 copies),
  interleaved and hard to read, and log files and progress bars multiply the same way;
- after DDP's all-reduce the ranks hold the same model, so one rank's report says it all; the same habit
  makes rank 0 the only one that writes checkpoints (lesson 03, part 8);
- per-rank information (each rank's shard or its own loss) must be gathered to rank 0 first, or printed
  labelled by rank on purpose."""),
    (0, 4): (VALUE + " + rubric", f"""
The error names ranks {VALUES[0, 4]} (check: lesson00.timeout_names([0, 1])). Rank 0 is still sleeping at the
deadline. Rank 1 did nothing wrong but is unfinished too: it reached the all-reduce in time and waits inside
it, since a collective completes only when every rank of the group has joined. launch stops and names every
rank that has not returned, and says where each one was."""),
    (1, 1): (VALUE, f"""
GD multiplies the error along each eigenvector of the Hessian H = 2AᵀA/N by (1 − lr·λ); it converges when
|1 − lr·λ| < 1 for every λ, so lr < 2/λ_max. Here λ_max ≈ 8.124 (A with the bias column): lr < {VALUES[1, 1]},
which is why the explorer's GD converges at 0.2 and diverges at 0.3. Check: lesson01.largest_stable_lr(0.2462)."""),
    (1, 2): (VALUE, f"""
σ²/B · (N − B)/(N − 1) with σ² = 42.63 and N = 354: 42.63/10 · 344/353 ≈ {VALUES[1, 2]}.
Check: lesson01.minibatch_variance(10, 4.155)."""),
    (1, 3): (VALUE + " + rubric", f"""
η·tr Σ/(4B) with tr Σ ≈ 19.08 at the optimum: 0.02 · 19.08/8 ≈ {VALUES[1, 3]}.
Check: lesson01.noise_floor(0.02, 2, 0.0477).
Then sgd_chains(0.02, 2), its second half averaged as in part 3, measured: 0.0569 (0.0568 and 0.0566 with seeds
1 and 2), about 19 % above the prediction. A good comparison says why: η/B = 0.01 is four times part 3's
smallest, and the formula is first order in η; part 3's printout already showed it growing low with η/B."""),
    (1, 4): (RUBRIC, """
Measured with the explorer's settings (lr 0.3, 10 epochs): every batch size diverges, and sooner the smaller
the batch: the loss passes 10× its start after 0.25 epoch at B = 1, about 0.5 epoch at B = 8 and B = 32, and
6 epochs with GD. A good answer explains the curvature: a batch's Hessian 2A_BᵀA_B/B is the mean of the
per-example Hessians 2·a_i a_iᵀ, each with one non-zero eigenvalue 2|a_i|², and the largest eigenvalue of a
mean is at most the mean of the largest eigenvalues. Here (measured): 2|a_i|² has median 19.0 and maximum
102.5 against λ_max = 8.12 for the whole data set, 98.9 % of single examples lie above 2/0.3 = 6.67, and
random batches of 8 and 32 have mean λ_max 10.4 and 8.7. A small batch's step overshoots along its own
sharp direction, and small batches also take more steps per epoch."""),
    (1, 5): (RUBRIC, """
Measured (200 runs, the cell of part 5 with 3.0 for 6.0): the escape rates fall from 81 %, 41.5 %, 1 %, 0 %
(B = 1, 2, 4, 8) to 3.5 %, 0 %, 0 %, 0 %; GD stays at 0 %. Less noise, fewer crossings of the ridge.
A good answer on "flat minima": here the noise carries SGD to the deeper minimum although it is the sharper
one (curvature 8.87 against 7.06), so what decides is the ridge against the noise and where the runs start,
not flatness; the claim is an empirical observation about some real networks, not a law, and this
caricature proves nothing about them either. Yes, depth and flatness can point the other way: stretch the
right-hand well, e.g. ((x/1.5)² − 1)² − 0.3x for x > 0 (and its gradient), which leaves the left minimum
(x = −0.96, loss 0.294, curvature 7.06) and moves the right one to x ≈ 1.58 with loss −0.462 and curvature
4.13: deeper and flatter."""),
    (2, 1): (CODE_KIND, """
2(K − 1)/K · M bytes: K − 1 steps of reduce-scatter and K − 1 of all-gather, each sending one K-th of the
gradient (part 3's table: 1.75 M at K = 8). Check: lesson02.ring_bytes_per_worker(8, 9600, ring_bytes(8, 9600))."""),
    (2, 2): (VALUE, """
200/256 = 0.78125 and 56/256 = 0.21875: each shard's mean gradient stands for its examples, so it is weighted by
its share of the batch. The plain mean (0.5, 0.5) is refused.
Check: lesson02.shard_weights([200, 56], [0.78125, 0.21875])."""),
    (2, 3): (VALUE, f"""
Multiply the learning rate by K = {VALUES[2, 3]}: averaging K summed-loss gradients gives 1/K of the full batch's summed
gradient (part 2 printed the ratio 0.250 at K = 4). Adding the K gradients instead of averaging them fixes it
too. Check: lesson02.summed_loss_factor(8, 8)."""),
    (2, 4): (VALUE + " + rubric", """
False (check: lesson02.towers_equal_uneven_ghost_batch_norm(False)). tensor_split(250, 4) gives chunks of
63, 63, 62 and 62. Both sides normalise each chunk with its own statistics, so each chunk's loss is the same
on both; but the full batch's mean loss weights chunk k by n_k/250, while the plain mean of the towers
weights each by 1/4. Weights n_k/250 ([63, 63, 62, 62]/250) make them equal: part 2's fix for uneven shards."""),
    (3, 1): (VALUE, """
3 without drop_last (10 padded to 12 with 2 repeats), 2 with drop_last (8 used, 2 left out); part 2 showed
both. Check: lesson03.samples_per_rank(10, 4, False, 3) and lesson03.samples_per_rank(10, 4, True, 2)."""),
    (3, 2): (VALUE, """
15 without no_sync (every micro-batch's backward all-reduces: 5 × 3) and 5 with it (only the last
micro-batch of each step); the model fits in one bucket. Check: lesson03.allreduce_calls(5, 3, False, 15) and
lesson03.allreduce_calls(5, 3, True, 5)."""),
    (3, 3): (VALUE, f"""
lr/N = 0.004/4 = {VALUES[3, 3]}: DDP divides the sum of the ranks' (summed-loss) gradients by the world size, so DDP
at lr moves like one process at lr/N (part 5). Check: lesson03.summed_loss_lr(4, 0.004, 0.001)."""),
    (3, 4): (RUBRIC, """
torchrun --standalone --nproc_per_node=1 -m dpedu.scripts.train_ddp --steps 10 --batch-size 64.
Measured: "1 rank(s) on gloo, 10 steps of 1 x 64 examples: parameter checksum -0.83063, test accuracy 0.443,
replicas identical: True"; the 2 × 32 run of "The same training under torchrun" printed the same checksum
(both within 1e-4 of one process × 64; the last digits depend on the CPU). A good answer says why: one rank
of 64 and two of 32 take the same global batches (DistributedSampler shuffles once and deals the same order
out) and the same averaged gradient, so they train the same model up to float rounding (part 4)."""),
    (3, 5): (RUBRIC, """
A good answer names these risks, for a shared file system (NFS, Lustre, a cloud bucket):
- all ranks write the same file at once: writes interleave or truncate one another, and the file can end
  up corrupt or mixed from several writers, N times the I/O for the same bytes;
- without the barrier a rank can load the file while another is still writing it: a half-written file
  (an unpickling error) or the previous checkpoint (silently the wrong state), so ranks resume differently.
The fix: one writer (rank 0; all replicas are identical, part 7), written atomically (a temporary file and a
rename, lesson 10 part 2), then a barrier, then every rank loads."""),
    (4, 1): (CODE_KIND, """
A binomial tree: at distance 1, 2, 4, ... the partner at rank + distance sends its partial sum and is done;
after ⌈log2 p⌉ rounds rank 0 holds the sum and sends it back down the same pairs. 2⌈log2 p⌉ steps, each
sending the whole tensor: fewer steps than the ring's 2(p − 1), more bytes per rank (good for small
messages). Check: lesson04.all_reduce_from_messages(tree_all_reduce)."""),
    (4, 2): (CODE_KIND, """
Each rank puts its tensor in its own row, then for p − 1 steps sends to its right neighbour the row that
arrived in the previous step while receiving the next from its left, posting isend and irecv before waiting.
Every rank sends (p − 1) rows. Check: lesson04.all_gather_from_messages(ring_all_gather)."""),
    (4, 3): (VALUE, f"""
2(p − 1)/p · n = 2 · 7/8 · 100 · 2²⁰ = {VALUES[4, 3]:,} bytes (175 MiB).
Check: lesson04.ring_bytes_per_rank(100 * 2**20, 8, 183500800)."""),
    (4, 4): (CODE_KIND, """
T = 2(p − 1)α + 2(p − 1)/p · n · β = 30α + 1.875 · 26,214,400 · β for p = 16. With the fit printed in the lesson
(α = 204 µs, β = 0.63 ns per byte): 6.1 ms + 31.0 ms ≈ 37 ms; yours differs with your machine's fit.
Check: lesson04.ring_seconds(25 * 2**20, alpha, beta, 16, ring_seconds(25 * 2**20, alpha, beta, 16))."""),
    (5, 1): (VALUE, f"""
MiniDDP: {VALUES[5, 1]["MiniDDP"]}. It opens a new bucket before a gradient would take the current one past the cap:
3 + 3 MiB would be 6 MiB, over 5, so every 3 MiB gradient gets a bucket of its own.
torch DDP: {VALUES[5, 1]["torch DDP"]}, from its second step on (its first sends one bucket). It adds gradients until a
bucket has *reached* the cap: 3 MiB has not, 6 MiB has, so the buckets are 6 and 6 MiB, each over the cap by one
tensor (with the cap set, as here; left at its default, the first bucket closes once it reaches 1 MiB).
Check: lesson05.buckets_per_step([3 * 2**20] * 4, 5, 4, 2)."""),
    (5, 2): (RUBRIC, """
4.5 M float32 parameters are 18 MB of gradients: under a 25 MB cap they all fit in one bucket, which is ready
only when the last gradient (the first layer's) is, so its all-reduce cannot start before backward ends:
no overlap is left. Measured (2 ranks, step_times as in lesson 05a, part 1, 15 steps): 25 MB, 1 bucket, started 1.2 ms
after the last gradient, 46.6 ms per step against torch DDP's 46.5 ms at the same cap; 5 MB, 5 buckets, 4 of
them started before the last gradient, 45.7 ms. On this 2-core CPU the overlap buys little either way (lesson
05a, part 1 says why); on GPUs, where it hides communication, one bucket for the whole model throws that away.
torch DDP, left at its default cap, keeps its first bucket at 1 MB for the same reason (passed explicitly, as
here, 25 MB gives torch DDP one bucket too: lesson 05b, part 1)."""),
    (5, 3): (VALUE, f"""
fp16_compress_hook all-reduces the bucket in float16: 12.5 MiB. A ring sends 2(p − 1)/p of that from each rank:
2 · 7/8 · 12.5 MiB = {VALUES[5, 3]:,} bytes (21.9 MiB), against 43.75 MiB for the float32 bucket.
Check: lesson05.compressed_ring_bytes(25 * 2**20, 8, 22937600)."""),
    (5, 4): (VALUE, f"""
The matrix is 4096 · 4096 = 16,777,216 numbers; P and Q are 4096 · 4 each, 32,768 together:
{VALUES[5, 4]:.0f} times fewer. In general m·n / (r(m + n)): large square matrices compress most. PowerSGD sends P and Q
in two all-reduces, one after the other, and sends vectors (biases) uncompressed (lesson 05b, part 3).
Check: lesson05.powersgd_fewer(4096, 4096, 4, 512)."""),
    (6, 1): (VALUE, f"""
The edge at staleness τ = 3 is 2 sin(π/14) ≈ 0.445 on lr × λ_max, so lr < 0.445/4 ≈ {VALUES[6, 1]}
(check: lesson06.largest_lr(3, 4.0, 0.1113))."""),
    (6, 2): (VALUE, f"""
The round lasts as long as the slowest of 4 Exp(1) times: H_4 = 1 + 1/2 + 1/3 + 1/4 = 25/12 ≈ {VALUES[6, 2]}
(check: lesson06.sync_round_time(4, 2.083))."""),
    (6, 3): (VALUE, f"""
M − 1 = {VALUES[6, 3]:g}: with memoryless compute times the number of updates a gradient misses is geometric with mean
M − 1 (part 4 measured 7.00 for M = 8). Check: lesson06.mean_staleness(16, 15)."""),
    (6, 4): (RUBRIC, """
It diverges. Measured with part 4's simulate("async", lr=1.2), i.e. a step of 0.15 per update: the loss passes
1e6 after 63 updates and 1e30 by simulated time 63, where lr 0.15/8 converges. Part 2 predicts it: a
gradient arrives τ updates late, and delayed GD is stable only while lr · λ_max < 2 sin(π/(4τ + 2)); here
λ_max ≈ 8.12 and the mean staleness is M − 1 = 7 (edge 0.209), so 0.15/8 gives 0.152, inside, and 0.15 gives
1.22, far outside (already unstable at τ = 1, edge 1). Part 3's fix is the staleness-aware rate lr/τ."""),
    (6, 5): (VALUE + " + rubric", """
1 − 1/M = 0.5 (check: lesson06.implicit_momentum(2, 0.5)). The match stays exact in expectation: with
geometric staleness the expected asynchronous update is heavy ball with momentum 1 − 1/M for every M.
Measured with part 5's cell at M = 2 (20,000 runs): the largest gap between the mean of the async runs and
heavy ball is 0.0011, within one Monte Carlo standard error (0.0011), against 0.52 from plain GD."""),
    (6, 6): (VALUE + " + rubric", f"""
10,000/500 = 20 rounds, each an all-reduce of 150 M parameters × 4 bytes: {VALUES[6, 6]:,} bytes (12 GB), where DDP
would hand 500 times as many, 6 TB (check: lesson06.local_sgd_bytes(150_000_000, 10_000, 500, 12e9)).
With lr 1.0 in part 8's settings (measured): DDP ends at 0.006, local SGD at H = 4 at 0.005, but at H = 16 at 0.28
and at H = 64 at 1.35, and DiLoCo diverges (270 at H = 16, 193 at H = 64). A good answer says why: between
averages each replica steps alone on its own 16 examples, while DDP's step averages the gradient over 32, and at
lr 1.0 a replica's own steps are unstable (lesson 01: the noise SGD settles at grows with lr/B). The averaging is
not what fails: at H = 64, rank 0's own loss just before the last average was 6.3 and rank 1's 2.0, their
average's 1.35. Short rounds pull the replicas back before they stray; DiLoCo's outer momentum multiplies the
already large pseudo-gradients by up to 7 and runs away. Lin et al.'s post-local SGD starts with DDP and switches
to local SGD later, when the learning rate has decayed."""),
    (7, 1): (VALUE, f"""
8 times the batch (256 to 2048), 8 times the learning rate: {VALUES[7, 1]}
(check: lesson07.linear_scaling(0.1, 256, 2048, 0.8))."""),
    (7, 2): (VALUE, f"""
S = S_min (1 + B_crit/B) = 100 · (1 + 1000/250) = {VALUES[7, 2]} (check: lesson07.steps_at(100, 1000, 250, 500))."""),
    (7, 3): (VALUE, f"""
About {VALUES[7, 3]} (check: lesson07.largest_base_lr(32, 0.0306)). The scaled rate 32·lr₀ at batch 128 must stay
below the noisy quadratic's stability edge, which the gradient noise lowers a little below the noise-free
1/(32·λ_max) = 0.03125 (the loss's Hessian is 2Λ): the checker finds the edge near 0.03076 and refuses 0.03125.
Round down: a value just above the edge diverges."""),
    (7, 4): (RUBRIC, """
Measured with part 4's cell and lr = 0.5 · B/16 (0.5, 2, 8), training loss:
- after 3 epochs: B = 16 0.048, B = 64 0.056 (0.088 at lr 0.5), B = 256 diverged (about 3e21);
- after 60 updates: B = 16 0.202, B = 64 0.102, B = 256 NaN.
"At equal updates bigger batches are ahead" survives where the run stays stable (B = 64). "At equal epochs
smaller batches are ahead" narrows to 0.056 against 0.048 at B = 64, and at B = 256 the linear rule
breaks: lr 8 is past the curvature limit (part 1), so bigger batches still need more epochs. (With
√-scaling, lr 0.5, 1, 2: after 3 epochs 0.048, 0.073, 0.088, the order of the claim kept.)"""),
    (8, 1): (VALUE, f"""
{VALUES[8, 1]}: two per SyncBatchNorm layer, one in forward (sums, sums of squares and count, packed) and one in
backward (the two gradient sums, packed), made because each layer's input, a linear layer's output, needs a
gradient (a layer applied straight to the data makes none in backward); lesson 08a's part 2 counted [17, 33, 32,
16] for its 2 layers. Check: lesson08.allreduces_per_step(3, 6)."""),
    (8, 2): (VALUE, f"""
n counts every value of the channel over every rank: (3 + 1) samples × 5 positions = {VALUES[8, 2]}.
Check: lesson08.unbiased_count([3, 1], 5, 20)."""),
    (8, 3): (CODE_KIND + " + rubric", """
GhostBatchNorm2d below, as the norm of convnet in one process × 32 for 40 steps, e.g. in your session
equivalence.NORMS["ghost"] = lambda channels: GhostBatchNorm2d(channels, interleaved=True), then
equivalence.train(steps=40, batch_size=32, lr=0.1, ddp=False, norm="ghost"). Measured against lesson 08a's part 2's
per-replica curve (2 ranks × 16):
- contiguous chunks (tensor_split: examples 0-15 and 16-31): not the same curve, off by up to 0.024;
- rank 0 holds examples 0, 2, 4, ... of each global batch of 32 (DistributedSampler deals them out in turn,
  part 1), rank 1 the odd ones; with interleaved=True the chunks match, and the losses and the final
  parameters agree within 1e-6.
What still differs: the running statistics (measured up to 0.029 apart). The ghost layer updates them once
per chunk, twice per step (num_batches_tracked 80 against 40), while under DDP each rank updates its own
once per step from its chunk and DDP copies rank 0's to every rank at each forward."""),
    (8, 4): (RUBRIC, """
Measured: lesson 08a's part 1 sweep with 4 ranks and norm="sync": every gap below 1e-5, as with 2 ranks.
count_and_time with 20 steps (4 ranks × 16 hold only 22 batches per epoch), two runs each: SyncBatchNorm's 4
all-reduces per step took 5.6 to 7.5 ms on 2 ranks (44-48 % of a 12.8-15.6 ms step) and 22.9 to 26.4 ms on 4
ranks (59-64 % of a 38.8-41.0 ms step): about 4 times as long for twice the ranks. A good answer says why:
the messages are 16 to 33 values, so their cost is latency, and the message steps of an all-reduce grow
with p (a ring makes 2(p − 1): 2 on 2 ranks, 6 on 4); on this 2-core machine 4 ranks also share 2 cores, so
every all-reduce waits for each rank to be scheduled (the per-replica step grew too, 4.1-5.7 to 17.2-18.3
ms). With a core or GPU per rank only the latency term grows with p, but each of these all-reduces still
sits on the critical path."""),
    (8, 5): (VALUE, """
The sampler: yes, the same seed on every rank (True), or the shards overlap and miss examples (lesson 08b,
part 1: 1076 of 1438 digits read, 362 twice). Dropout: no (False): with one seed every rank draws the same
masks. Check: lesson08.must_share_seed("sampler", True) and lesson08.must_share_seed("dropout", False)."""),
    (8, 6): (VALUE, """
4 ranks × 2 workers, seed 0. seed + worker_id: every rank's worker 0 seeds 0 and its worker 1 seeds 1, so 2
distinct streams, each drawn on 4 ranks at once, as one seed everywhere was for dropout (part 1). seed + rank +
worker_id: the seeds are 0 1, 1 2, 2 3, 3 4, so 5 distinct: rank r's worker 1 repeats rank r + 1's worker 0.
seed + rank * num_workers + worker_id: 0 1, 2 3, 4 5, 6 7, all 8 distinct. Check:
lesson08.distinct_worker_streams("seed + rank + worker_id", 4, 2, 5), and 2 and 8 for the other two. Even the
third rule mends less than a generator seeded with seed + rank (part 1): it reseeds torch's stream alone, so
Python's random and NumPy keep the seeds the loader gave them, the same on every rank when the global seed is;
and it gives a worker the same seed every epoch, so each epoch repeats the last one's draws. A good answer
names both, and mends them: add the epoch to the seed, and seed random and NumPy from it too."""),
    (9, 1): (VALUE, f"""
RANK = GROUP_RANK × LOCAL_WORLD_SIZE + LOCAL_RANK = 2 × 8 + 3 = {VALUES[9, 1]}
(check: lesson09.global_rank(8, 2, 3, 19))."""),
    (9, 2): (CODE_KIND, """
Read torchrun's RANK and WORLD_SIZE first, then Open MPI's, MPICH's and Slurm's, as ints. The order matters:
torchrun started by srun sees SLURM_PROCID too, and the right rank is torchrun's. Check:
lesson09.rank_and_size(my_rank_and_size)."""),
    (9, 3): (VALUE + " + rubric", f"""
2 · 63/64 · 25 · 2²⁰ bytes at 12.5e9 bytes per second: {VALUES[9, 3]} ms
(check: lesson09.bucket_milliseconds("100 GbE", 64, 4.13)).
A ring of 8 takes 3.67 ms: each rank sends 2(p − 1)/p of the bucket, 1.75 at p = 8 and 1.97 at p = 64, never
more than twice, whatever p. What grows with p is the latency term, 2(p − 1)α."""),
    (9, 4): (VALUE, f"""
Each rank sends 2(p - 1)/p of the gradients: 1.75 x 4 bytes a parameter at 1.25e9 bytes per second, so 1 s
carries 1.25e9 / 7 = {VALUES[9, 4] / 1e6:.1f} M parameters (check: lesson09.gradient_parameters("10 GbE", 8, 1.0,
{VALUES[9, 4]:.4g})). InfiniBand NDR's 50e9 bytes per second is 40 times as much: {40 * VALUES[9, 4] / 1e9:.2f} B
parameters. A good answer adds that real steps overlap this with backward (lesson 05), and that the latency
term, 2(p - 1)α, grows with the ring while the bandwidth term does not."""),
    (9, 5): (VALUE + " + rubric", f"""
{VALUES[9, 5]}
(check: lesson09.torchrun_command("...") with that line). Every node runs this same line, node 2 included: the
c10d rendezvous on node1:29400 numbers the nodes itself (part 1), so no --node-rank is given, and the
--rdzv-id, a name of the job's own, is what its agents meet under (the check accepts torchrun's default too).
A good answer says so, and that torchrun's static form (--node-rank=1 --master-addr=node1 --master-port=...)
would also start a job, but not this one, whose rendezvous is c10d's: it needs a line per node, each node's
rank written by hand."""),
    (10, 1): (RUBRIC, """
Measured (3 runs each): with rank 1 sleeping, rank 0 raised "Timed out waiting 2000ms for recv operation to
complete" after 2.0 s; with rank 1 returning at once, rank 0 raised after about 0.01 s, with "Connection reset
by peer" or "Connection closed by peer" (which one varies from run to run). Not a timeout: rank 1's process
ended, its process group and sockets closed, and gloo on rank 0 saw the connection drop at once instead of
waiting. A good answer notes that an early exit (or crash) of one rank shows up on the others as a
connection error that names no cause: look at the rank that is gone (part 2)."""),
    (10, 2): (RUBRIC, """
Run train_resumable("exercise", "--kill-rank", "1", "--kill-at-step", "25", every=10) after making a new
folder for `checkpoints`. Measured: torchrun's
agent logged local_rank 1 failed with exit code -9; attempt 1 printed "resuming from the checkpoint of step 20"
and "resumed from step 20, ran 40 steps, finished at step 60, replicas identical: True"; the final parameters
are identical to an uninterrupted run's (torch.equal on every tensor). Steps 21 to 25 were done twice (5
steps): the kill came after step 25, and the last checkpoint was step 20's. Wall time 11.0 s against 7.8 s
uninterrupted. A good answer also says why identical: the checkpoint holds the model and the momentum, and
each step's batch depends only on the step number."""),
    (10, 3): (VALUE + " + rubric", f"""
A global batch of 80 gives epochs of 17 steps on 1 worker, 17 on 2 and 18 on 4 (check:
lesson10.steps_per_epoch(80, 4, 18)). Of 1438 examples, one worker reads 1438 // 80 = 17 full batches; on 2
workers each gets 719 and reads 719 // 40 = 17; on 4, DistributedSampler pads 1438 to 1440 so that every worker
gets 360, and 360 // 20 = 18: the padding completes an 18th batch. A job on 4 workers that loses 2 would read
other examples at step k after the resize, and part 3's script refuses its checkpoint. For 1, 2, 3 and 4
workers the batch must divide by 12: 48 gives 29, 29, 30, 30 steps and 60 gives 23, 23, 24, 24 (the padding
again), 64 does not divide among 3; the smallest that gives all four the same epochs is
{VALUES[10, 3]["one batch for 1 to 4 workers"]}, 17 steps on each (check: lesson10.steps_per_epoch(84, 3, 17)).
A good answer also names the other way out: count the position in the data in examples, not steps."""),
    (10, 4): (VALUE, f"""
Llama 3's rate, 419 / (54 x 24 x 16,384) = 1.97e-5 interruptions per GPU-hour, gives 4,096 GPUs a mean time
between failures of 12.4 h (742 min). Young's rule: sqrt(2 x 5 x 742) = {VALUES[10, 4]} minutes (check:
lesson10.checkpoint_minutes(4096, 5, {VALUES[10, 4]})). With a 30 s write, sqrt(2 x 0.5 x 742) = 27 minutes: the
interval shrinks only with the square root of the write time, and a job then loses on average about half an
interval of work per failure plus the restart. A good answer says why the rate per GPU is only an estimate
(Llama 3 ran on "up to" 16,384 GPUs, so the rate per GPU is if anything higher)."""),
    (10, 5): (VALUE, f"""
{VALUES[10, 5]} (check: lesson10.name_the_failures(that list)). 1: a client that cannot connect within the
timeout (to 127.0.0.2, where no store listens) is a wrong MASTER_ADDR; 3, a receive that waited its 2 s for a peer
that never sent, is the skipped collective. 2 is DDP's reducer at the second iteration, a parameter that got no
gradient; 4 is gloo looking for an interface the machine has not; 5 is gloo receiving 8 bytes where it expected 4
(the shapes differ, and only DETAIL names them); 6 is the store's server finding its port taken; 7 is DETAIL's
fingerprint check comparing the ranks' calls before they run."""),
    (11, 1): (VALUE, f"""
ZeRO-2 keeps the fp16 parameters whole (2Ψ) and shards gradients and optimizer state (14Ψ/N):
2 · 13e9 + 14 · 13e9/16 bytes = 26 + 11.375 = {VALUES[11, 1]} GB
(check: lesson11.zero_gigabytes(13e9, 16, 2, 37.375)). Under torch autocast's 4 + 4 + 8 the whole float32
parameters stay on every GPU and the gradients and optimizer state are sharded: 4 · 13e9 + 12 · 13e9/16 bytes
= 52 + 9.75 = 61.75 GB (check: lesson11.zero_gigabytes(13e9, 16, 2, 61.75, "autocast"))."""),
    (11, 2): (VALUE, """
3e-8: yes (True), barely. float16's smallest positive value is 2^-24 ≈ 5.96e-8; a value above half of it,
2^-25 ≈ 2.98e-8, rounds up to 2^-24, so 3e-8 is stored as about twice itself. 2e-8: no (False), it rounds to 0.
Check: lesson11.survives_float16(3e-8, True) and lesson11.survives_float16(2e-8, False)."""),
    (11, 3): (VALUE, f"""
ceil(1,732 / 3) = {VALUES[11, 3]} elements in each rank's shard, padding included (check:
lesson11.zero_one_slice(1732, 3, {VALUES[11, 3]})): the flat vector is padded with 2 zeros to 1,734 = 3 x 578,
so the last rank's slice ends in the padding. Measured with train_zero_one on 3 ranks: optimizer state 8 x 578
= 4,624 bytes on every rank (Adam's two float32 moments), shards (0, 578), (578, 1156), (1156, 1734); each
rank hands the reduce-scatter 4 x 1,734 = 6,936 bytes and the all-gather 4 x 578 = 2,312; the parameters equal
DDP's within 1e-6. The padding costs 2 elements of state and of traffic, nothing in the result: the padded
gradients are 0, and the padded parameters are never copied back."""),
    (11, 4): (VALUE, f"""
HSDP shards every byte over its group of 8 and keeps one copy per group: 16 · 7.5e9/8 = {VALUES[11, 4]} GB per
GPU, whatever the byte layout (4 + 4 + 8 also adds up to 16) and however many groups there are (check:
lesson11.hsdp_gigabytes(7.5e9, 8, 15, "autocast")). FSDP over all 64: 16 · 7.5e9/64 = 1.875 GB. What HSDP buys
for the 8 times more memory: its all-gathers and reduce-scatters stay inside a node, and only an all-reduce
of each GPU's gradient shard (4 · 7.5e9/8 bytes with float32 gradients) crosses between nodes."""),
    (11, 5): (VALUE, f"""
Each checkpointed block keeps its input, 512 · 128 float32 values: 12 · 512 · 128 · 4 = {VALUES[11, 5]:,} bytes
(check: lesson11.kept_with_checkpointing(12, 128, 512, {VALUES[11, 5]})); without checkpointing 9 times that,
{9 * VALUES[11, 5]:,} bytes (input, 4w before GELU and 4w after, per block: lesson 11b measured it on 4 blocks).
Checkpointing pairs of blocks keeps 6 inputs, half as much, but recomputes 2 blocks at once in backward, so
the peak grows by one block's activations: the segment length trades the inputs kept against the
activations recomputed at once: with segments of k blocks, L/k inputs plus k blocks' activations, least
near k = √(L/9) here (Chen et al. 2016, arXiv:1604.06174: segments of about √L blocks)."""),
    (11, 6): (RUBRIC, """
Measured on 2 ranks (tanh_mlp, Ψ = 1,732): after forward 3,464 bytes gathered in place, all bfloat16 (all the
parameters, kept, at 2 bytes each: half of the 6,928 float32 bytes); 3 all-gathers a step (one per layer,
none in backward), rank 0 handing in 1,732 bytes (its bfloat16 half of the parameters); the reduce-scatters
6,928 bytes (every float32 gradient, reduced in float32). A good answer derives these before running: 4Ψ/2
bytes held, L all-gathers of 2Ψ/N bytes, 4Ψ to reduce-scatter. Short of memory: keep the default
reshard_after_forward=True (and use the bfloat16 policy); on a slow network: reshard_after_forward=False,
which halves the all-gathers at the price of holding every parameter during the step, as Llama 3 did."""),
    (12, 1): (VALUE, """
(p − 1)/(m + p − 1) = 3/11 ≈ 0.273 (check: lesson12.bubble(4, 8, 3 / 11)); with 16 micro-batches 3/19 ≈ 0.158.
Under 10 % needs 3/(m + 3) < 0.1, so m > 27: 28 micro-batches (3/31 ≈ 0.097; 27 gives exactly 0.10)."""),
    (12, 2): (VALUE, """
1F1B: stage r keeps at most p − r micro-batches, so stage 1 keeps 3 (check: lesson12.micro_batches_kept("1f1b",
4, 8, 1, 3)). GPipe: all 8, since every forward comes before the first backward
(lesson12.micro_batches_kept("gpipe", 4, 8, 1, 8))."""),
    (12, 3): (RUBRIC, """
In timed_schedules, pass work_s = 0.4 on the last rank and 0.2 on the others. Measured (4 stages, 8
micro-batches): the step takes 0.97 s instead of 0.58 s, under GPipe and under 1F1B alike, and the idle share
grows from 0.29 to 0.48 for both. The slowest stage sets the pace: it works 0.81 s of the 0.97 s while the
others work 0.41 s each and spend the rest waiting for its outputs and its gradients. The schedule
changes memory (lesson 12a, part 2), not the pace. Balance the stages' work, not their layer counts."""),
    (12, 4): (RUBRIC, """
4 all-reduces per step: 2 in forward (g after each block's B) and 2 in backward (f before each block's A).
Measured with lesson 12a's part 3 functions on 4 ranks, two blocks in a row: the all-reduces were ['forward', 'forward',
'backward', 'backward'], and output and input gradient equal the unsplit pair's within 1e-5.
A good answer explains both: the second block's column-split A multiplies the whole input h (each rank's
columns need every hidden unit), and GeLU after it is not linear, so the partial sums must be added first: g
of the first block cannot go. In backward the first block's row-split B needs the whole gradient of h, but
each rank only has its part from its own columns of A: f of the second block adds them. A transformer layer
(attention + MLP, both built this way) therefore costs 2 all-reduces in forward and 2 in backward."""),
    (12, 5): (VALUE + " + rubric", """
Tensor parallel 4 × ZeRO-2 (check: lesson12.layout_without_zero3(70e9, 64, 80, 4, 1, 2)). In the order of
lesson 12b, part 1:
DDP holds 16 × 70e9 = 1,120 GB a GPU, ZeRO-1 4Ψ + 12Ψ/64 = 293 GB, ZeRO-2 2Ψ + 14Ψ/64 = 155 GB: none fits. With
tensor parallelism t each GPU holds Ψ/t and ZeRO divides by 64/t: t = 2 gives 560, 153 and 85.3 GB (just over
80), t = 4 gives 280, 83.1 and 50.3 GB, the first to fit. (ZeRO-3 alone would fit at 16Ψ/64 = 17.5 GB, for 1.5
times DDP's traffic.) A good answer adds that activations come on top, so the 30 GB left is what the
micro-batch and recomputation must fit in (that part's remedies), and that t stays within a node of 8 GPUs."""),
    (12, 6): (VALUE, """
8 ranks, t = 4: the tensor-parallel groups are consecutive ranks, [0, 1, 2, 3] and [4, 5, 6, 7], each one
replica whose layers are split four ways; the data-parallel groups take every 4th rank, [0, 4], [1, 5], [2, 6]
and [3, 7], the ranks holding the same slice in each replica. Rank 6: tensor [4, 5, 6, 7], data [2, 6] (check:
lesson12.group_ranks(8, 4, 6, "tensor", [4, 5, 6, 7]) and lesson12.group_ranks(8, 4, 6, "data", [2, 6])). Its
activations' all-reduces go to 4, 5 and 7, its gradients' to 2 alone."""),
    (13, 1): (VALUE + " + " + RUBRIC, f"""
96 / (3 ranks x 2 micro-batches) = {VALUES[13, 1]} examples per forward-backward
(check: lesson13.micro_batch(96, 3, 2, {VALUES[13, 1]})). 64 is not a multiple of 3: no equal split of the
global batch exists, and with unequal shards the ranks' mean loss would no longer be the global batch's mean
(lesson 03), so the script refuses it before any rank starts (batches.micro_batch_size)."""),
    (13, 2): (VALUE, f"""
ceil(1000 / 16) = 63 examples per rank, 16 x 63 = 1008: {VALUES[13, 2]} examples repeated
(check: lesson13.padding(1000, 16, {VALUES[13, 2]})). On 3 ranks it is 2 (334 x 3 = 1002), part 2's case."""),
    (13, 3): (VALUE, f"""
Step 50 is in the warmup (100 steps): 3e-3 x (50 + 1) / 100 = {VALUES[13, 3]:.2e}
(check: lesson13.learning_rate_at(50, {VALUES[13, 3]:.2e}))."""),
    (13, 5): (VALUE, f"""
6 × 85e6 + 12 × 12 × 768 × 1024 = 510,000,000 + 113,246,208 = {VALUES[13, 5]["flops_per_token"]:,} FLOPs per
token (check: lesson13.training_flops(85_000_000, 12, 768, 1024, {VALUES[13, 5]["flops_per_token"]})): attention
adds 22 % to the 6N of the weights at this length. MFU = 1.5e6 tokens/s × {VALUES[13, 5]["flops_per_token"]:.4g}
/ (8 × 312e12) = {VALUES[13, 5]["mfu"]:.3f} (check: lesson13.model_flops_utilisation(1.5e6,
{VALUES[13, 5]["flops_per_token"]}, 8, 312e12, {VALUES[13, 5]["mfu"]:.3f})): 37.5 % of the GPUs' peak, the
rest going to what is not a model matmul (softmax, LayerNorm, the optimizer), to memory-bound kernels and to
communication that is not hidden."""),
    (13, 4): (RUBRIC, """
A good answer: 2 ranks x 2 micro-batches of 16 make the same global batch of 64, so the schedule and the
updates are the same and the run learns alike (held-out exact match above 0.95, as in part 3). The first loss
is the mean of 4 means of 16 instead of 2 means of 32: equal in exact arithmetic, equal in float32 only to
rounding (about 1e-7 relative), because the sums run in another order; under no_sync the first micro-batch's
gradient stays local and the last backward all-reduces the accumulated sum, so there is one all-reduce per
step either way."""),
    (13, 6): (VALUE + " + " + RUBRIC, f"""
Copy k = rank x workers + worker = 1 x 3 + 2 = 5 of n = 4 x 3 = 12 copies yields 5, 5 + 12, 5 + 24:
{VALUES[13, 6]} (check: lesson13.stream_share(30, 4, 3, 1, 2, {VALUES[13, 6]})). Without shard=True every copy
yields all 30: each example comes 12 times an epoch, 4 ranks x 3 workers, as lesson 13b's part 1 showed with
2 x 2."""),
    (13, 7): (VALUE + " + " + RUBRIC, f"""
64 examples: 3.2 ms of compute and 0.3 ms of all-reduce, 0.3 / 3.5 = {VALUES[13, 7][64]:.3f} of the step (check:
lesson13.communication_share(0.05, 0.3, 64, {VALUES[13, 7][64]:.3f})); 4 examples: 0.2 ms and 0.3 ms,
{VALUES[13, 7][4]:.1f} (check: lesson13.communication_share(0.05, 0.3, 4, {VALUES[13, 7][4]:.1f})). A good answer:
a global batch of 64 on 16 ranks leaves each 4 examples, so the all-reduce is 60 % of every step: a step takes
0.5 ms where one process takes 3.2 ms for all 64, 6.4 times faster on 16 times the hardware (efficiency 0.4),
because the all-reduce does not shrink with the batch (on real links it grows with the ranks: lesson 09).
DDP overlaps the all-reduce with backward (lesson 05a), which hides it only where there is enough compute to
hide it behind."""),
    (14, 1): (VALUE, f"""
8 examples x 4 micro-batches x 3 processes = {VALUES[14, 1]} (check: lesson14.examples_per_step(8, 4, 3,
{VALUES[14, 1]})): the loader's batch_size is the per-process micro-batch, not the global batch."""),
    (14, 2): (VALUE, f"""
ceil(359 / 50) = 8 batches, dealt to 4 processes: 2 rounds of 4 x 50, so gather returns
{VALUES[14, 2]["gather"]} (check: lesson14.gathered(359, 50, 4, {VALUES[14, 2]["gather"]})); the last batch (9
examples) was padded to 50 from the start of the data. gather_for_metrics drops the 41 repeated ones:
{VALUES[14, 2]["gather_for_metrics"]}, every example once."""),
    (14, 3): (VALUE + " + " + RUBRIC, f"""
{VALUES[14, 3]} (check: lesson14.twice_divided_lr(0.1, 4, {VALUES[14, 3]})): the gradient is divided by 4 twice,
and SGD's step (its momentum buffer too) is linear in the gradient; weight decay, added after backward, is not
divided, so with it the run is no longer exactly one at lr / 4. A good answer for Adam: its update is
m / (sqrt(v) + eps), where m and v are running means of the gradient and of its square; dividing every
gradient by 4 divides m by 4 and sqrt(v) by 4, so the update is unchanged except where sqrt(v) is not large
against eps (1e-8). The mistake then hides, until the loop moves to SGD or its loss value is read."""),
    (14, 4): (RUBRIC, """
A good answer: the DDP wrapping and DistributedSampler go into accelerator.prepare; `ddp.no_sync()` becomes
`with accelerator.accumulate(model):` around each micro-batch; `/ len(micro_batches)` goes (accelerator.backward
divides); `scaler.scale(loss).backward()` becomes accelerator.backward(loss) and the GradScaler goes
(mixed_precision="fp16" makes one on GPUs); `scaler.unscale_` + `clip_grad_norm_` become
accelerator.clip_grad_norm_ under `if accelerator.sync_gradients:`; `scaler.step(optimizer)` +
`scaler.update()` become optimizer.step() on every micro-batch (a no-op until the last); the `.to(device)` of
each batch goes (the prepared loader moves it). What stays: the learning-rate schedule per optimizer step, but
one iteration is now a micro-batch, so a schedule advanced by hand must advance only when
accelerator.sync_gradients is true. A scheduler passed to prepare is not stepped for you: the loop still calls
scheduler.step() every iteration, and it acts only when the gradients were synchronised, and then steps the
wrapped scheduler once per process (accelerate's AcceleratedScheduler, with the default split_batches=False),
so a warm-up written in optimizer updates ends at half its length on 2 ranks: write its length in
single-process steps, or pass Accelerator(step_scheduler_with_optimizer=False) and step it once per update
yourself. And the global loss for the log (accelerator.reduce or gather)."""),
}


def answer(lesson: int, exercise: int | None = None) -> None:
    """Print the model answer or rubric of ``exercise`` of ``lesson``; without ``exercise``, list the lesson's
    exercises and the kind of answer each has (computed value, code, rubric)."""
    whole("lesson", lesson, minimum=0, maximum=max(number for number, _ in TEXTS))
    exercises = {n: entry for (number, n), entry in TEXTS.items() if number == lesson}
    if exercise is None:
        print(f"Lesson {lesson:02d}: " + "; ".join(f"exercise {n}: {kind}" for n, (kind, _) in exercises.items()))
        return
    whole("exercise", exercise, maximum=max(exercises))
    kind, text = exercises[exercise]
    print(f"Lesson {lesson:02d}, exercise {exercise} ({kind})\n\n{text.strip()}")
    if (lesson, exercise) in CODE:
        print("\n" + inspect.getsource(CODE[lesson, exercise]))
