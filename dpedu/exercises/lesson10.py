"""Checks for lesson 10's exercises: failures named by their messages, how often to checkpoint, and the epochs of
an elastic run."""

from __future__ import annotations

import math

from dpedu._validate import real, whole
from dpedu.data_parallel.digits_ddp import digits_loader
from dpedu.exercises import close, number, verdict

# Llama 3 (arXiv:2407.21783, Table 5), as part 2 cites it: unexpected interruptions, days, GPUs
LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_GPUS = 419, 54, 16_384


def steps_per_epoch(global_batch_size: int, workers: int, answer: int) -> bool:
    """How many steps of ``global_batch_size`` examples does an epoch of the digits training set have on
    ``workers`` workers, each taking an equal share, as part 3's script reads it (``DistributedSampler``,
    then full batches only)?"""
    whole("global_batch_size", global_batch_size)
    whole("workers", workers)
    if global_batch_size % workers:
        raise ValueError(f"global_batch_size {global_batch_size} must divide among workers={workers}")
    answer = number(answer)
    truth = len(digits_loader(global_batch_size // workers, num_replicas=workers, rank=0))
    return verdict(answer == truth, "each worker gets ceil(1438 / workers) examples (DistributedSampler pads the "
                                    "last ones), in full batches of global_batch_size / workers")


def checkpoint_minutes(gpus: int, write_minutes: float, answer: float) -> bool:
    """At Llama 3's rate of unexpected interruptions per GPU-hour, how many minutes apart should a job on
    ``gpus`` GPUs checkpoint when a checkpoint takes ``write_minutes`` to write (Young's rule,
    √(2 · cost · MTBF))? Within 2 %."""
    whole("gpus", gpus)
    real("write_minutes", write_minutes, above=0)
    mtbf_minutes = 60 * LLAMA3_DAYS * 24 * LLAMA3_GPUS / (LLAMA3_INTERRUPTIONS * gpus)
    truth = math.sqrt(2 * write_minutes * mtbf_minutes)
    return verdict(close(answer, truth, 0.02), "the job's MTBF is one GPU's divided by the number of GPUs; "
                                              "then sqrt(2 x write time x MTBF), in minutes")


# The failures part 1 triggered, and a line each ended with there (its stored outputs), in another order
FAILURES = ("mismatched collectives", "a skipped collective", "mismatched shapes", "an unused parameter",
            "a port in use", "a wrong MASTER_ADDR", "a wrong network interface")
_EXCERPTS = (
    ("The client socket has timed out after 2000ms while trying to connect to (127.0.0.2, PORT).",
     "a wrong MASTER_ADDR"),
    ("Expected to have finished reduction in the prior iteration before starting a new one.", "an unused parameter"),
    ("Timed out waiting 2000ms for recv operation to complete", "a skipped collective"),
    ("ifa != nullptr. Unable to find address for: eth9", "a wrong network interface"),
    ("op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match expected size.", "mismatched shapes"),
    ("The server socket has failed to listen on any local network address. port: PORT, useIpv6: false, name: "
     "EADDRINUSE, message: address already in use", "a port in use"),
    ("Detected mismatch between collectives on ranks. ...Op type: ALLREDUCEvs BROADCAST", "mismatched collectives"),
)


def failure_excerpts() -> None:
    """Print the lines to name, numbered from 1."""
    for index, (line, _) in enumerate(_EXCERPTS, 1):
        print(f"{index}. {line}")


def name_the_failures(answer: list[str]) -> bool:
    """The failure each of ``failure_excerpts()``'s lines comes from, in their order, each one of ``FAILURES``."""
    if not isinstance(answer, (list, tuple)) or len(answer) != len(_EXCERPTS):
        raise TypeError(f"answer must be a list of {len(_EXCERPTS)} names, one per excerpt, got {answer!r}")
    unknown = [name for name in answer if name not in FAILURES]
    if unknown:
        raise ValueError(f"answer holds names that are not in lesson10.FAILURES: {unknown}")
    truths = [failure for _, failure in _EXCERPTS]
    wrong = [number for number, (name, truth) in enumerate(zip(answer, truths, strict=True), 1) if name != truth]
    return verdict(not wrong, f"excerpt(s) {wrong} not yet: which call was waiting, and for what (a peer's data, a "
                              "connection, an address to bind), and which check compared what?")
