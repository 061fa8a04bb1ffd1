"""Lesson 13 (13a and 13b): a real training run: a small GPT learns multi-digit addition on N ranks.

Modules (the first nine used by ``dpedu.scripts.train_addition``, the torchrun script the lesson runs):
- ``addition``: the data, generated from a seed: ``"12+39=150"`` (the sum written least significant digit
  first), disjoint training and held-out sets.
- ``gpt``: a small GPT-style transformer (causal ``scaled_dot_product_attention``).
- ``schedule``: warmup + cosine learning rate per optimizer step of the global batch.
- ``batches``: ``DistributedSampler`` shards cut into micro-batches, the same global batches for any number of
  ranks, resumable mid-epoch.
- ``step``: one optimizer step: accumulation under ``no_sync``, mixed precision, clipping the averaged gradient.
- ``evaluation``: exact-match accuracy, each rank on an unpadded shard, counts summed by an all-reduce.
- ``replicas``: the global loss, parameter checksums, every rank's random state for checkpoints.
- ``gradient_norms``: a communication hook recording each rank's and the averaged squared gradient norm, for the
  gradient noise scale measured inside DDP (``--noise-scale``).
- ``flops``: training FLOPs per token (6 N + 12 L d T) against ``FlopCounterMode``'s count, this machine's
  measured matmul peak, and MFU (the script's log and summary).
- ``data_loading``: ranks split the data, ``DataLoader`` workers split a rank's loading; an ``IterableDataset``
  sharded by rank x worker (lesson 13b, not the script).
- ``throughput``: the script's step timed on 1, 2, 4 ranks, oversubscription, compute of controlled duration with
  real all-reduces (lesson 13b), and the overlap of buckets with backward modelled (lesson 09); not the script.

Like every content package, it imports only ``dpedu.runtime``, ``dpedu.notebook``, dpedu's top level and itself.
"""
