"""Beyond plain data parallelism: splitting the model and its memory (lessons 11 and 12).

- ``model_parallel``: layers split across ranks, activations sent forward and gradients back.
- ``pipeline``: micro-batches, GPipe and 1F1B schedules, the bubble.
- ``zero_memory``: ZeRO and FSDP2 memory per rank against DDP, with the same results.
- ``zero_one``: ZeRO-1 by hand: reduce-scatter the gradients, step 1/N of the parameters, all-gather them.
- ``fsdp_step``: FSDP2 through one step: what resharding, a bfloat16 policy and prefetching hold and send.
- ``mixed_precision``: bfloat16 autocast on CPU, float16 with loss scaling on GPU.
- ``parallelism_plan``: which parallelism when, checked on published layouts.
- ``recompute``: activation checkpointing under DDP, the bytes it saves and the forward it repeats.
- ``two_d_parallel``: data × tensor parallelism on process subgroups; DDP over a module split across devices.
- ``sharded_checkpoints``: FSDP2 models saved per rank with ``torch.distributed.checkpoint``, loaded on other ranks.
"""
