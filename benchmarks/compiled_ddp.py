"""What torch.compile costs and gives under DDP on this machine: eager against ``DDP(torch.compile(model))``
with torch's default backend (inductor, which writes and compiles C++ on a CPU, Triton kernels on a GPU)
and with "aot_eager" (traced, no code generated), on lesson 05's 4-layer model, 2 ranks over gloo.

    .venv/bin/python benchmarks/compiled_ddp.py [--steps 10]

Prints each backend's first step (which compiles) and the median of the later steps, and checks that the
trained parameters agree with eager's within 1e-5. Inductor keeps what it compiled in a cache on disk, so a
second run compiles much faster: the script gives it an empty cache of its own, unless --warm-cache. Without
a C++ compiler, inductor fails: the script says so and measures the others.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import dpedu
from dpedu.data_parallel import compiled_ddp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per backend (the first compiles)")
    parser.add_argument("--warm-cache", action="store_true", help="use inductor's usual cache, as a rerun would")
    args = parser.parse_args()
    cache = None if args.warm_cache else tempfile.TemporaryDirectory()
    if cache is not None:  # set before the first launch, so every rank inherits it
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache.name
    backends = ["eager", "aot_eager"]
    if shutil.which("c++") or shutil.which("g++") or shutil.which("clang++"):
        backends.append("inductor")
    else:
        print("no C++ compiler found (c++, g++, clang++): inductor left out")
    results = {}
    for backend in backends:
        results[backend] = dpedu.launch(lambda b=backend: compiled_ddp.step_seconds(b, steps=args.steps), 2,
                                        timeout=900)[0]
        run = results[backend]
        print(f"{backend:>9}: first step {run['first']:8.3f} s, later steps {run['later'] * 1e3:7.2f} ms (median)")
    for backend, run in results.items():
        gap = max((a - b).abs().max().item() for a, b in zip(run["params"], results["eager"]["params"], strict=True))
        print(f"{backend:>9}: parameters within 1e-5 of eager's after {args.steps} steps: {gap < 1e-5} ({gap:.1e})")


if __name__ == "__main__":
    main()
