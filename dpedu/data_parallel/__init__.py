"""Data parallelism itself: averaging gradients across replicas, by hand and with torch (lessons 02 to 05, 08).

- ``nn_data_parallel``: ``torch.nn.DataParallel`` on the GPUs that are there (lesson 02).
- ``digits_ddp``: the digits MLP trained by DDP on N ranks and as one process (lesson 03; ``dpedu.scripts.train_ddp``).
- ``collectives``: all-reduce from point-to-point messages, three ways (lesson 04).
- ``cost_model``: the α-β model of communication time, fitted to measurements (lesson 04).
- ``mini_ddp``: DDP from scratch, per-parameter and bucketed (lesson 05).
- ``ddp_timing``: four ways to average gradients, timed on one model (lesson 05).
- ``compression``: DDP communication hooks that send fewer bytes (lesson 05).
- ``profile_trace``: torch DDP's all-reduces and backward ops as ``torch.profiler`` sees them (lesson 05).
- ``ddp_settings``: what DDP's settings do and cost: unused parameters, gradient views, bucket size (lesson 05).
- ``compiled_ddp``: torch.compile under DDP: the order that compiles, the graphs DDPOptimizer cuts, the buckets
  DDP then sends (lesson 05).
- ``sync_batchnorm``: BatchNorm over the global batch, written with all-reduce (lesson 08).
- ``equivalence``: when N ranks equal one process with N times the batch, each condition breakable (lesson 08).
"""
