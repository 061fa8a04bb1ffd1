"""Lesson 14's accelerate loop as a script: the same file runs under either launcher.

    accelerate launch --multi_gpu --num_processes 2 -m dpedu.scripts.train_accelerate --out run.pt
    torchrun --standalone --nproc-per-node 2 -m dpedu.scripts.train_accelerate --out run.pt

Both start one process per rank with torchrun's variables set (``accelerate launch --multi_gpu`` calls torchrun's
own code), and the ``Accelerator`` reads them: each process on its own GPU where there are GPUs (as many GPUs as
processes); on a machine without GPUs ``Accelerator(cpu=True)``, gloo on the CPU (since accelerate 1.13 a plain
``Accelerator()`` there does not join the ranks: it reports one process and each trains alone, which
``train_with_accelerate`` refuses). Rank 0 saves the final parameters to ``--out``.
"""

import argparse

import torch

from dpedu.frameworks.accelerate_loop import Settings, train_with_accelerate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=Settings.steps)
    parser.add_argument("--out", required=True, help="where rank 0 saves the final parameters")
    args = parser.parse_args()
    record = train_with_accelerate(Settings(steps=args.steps), cpu=not torch.cuda.is_available())
    if record.process_index == 0:  # the Accelerator's numbering: the script also runs as one plain process
        torch.save(record.parameters, args.out)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
