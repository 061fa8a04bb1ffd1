"""Scaling out to real clusters, and what goes wrong there (lessons 09 and 10, and the appendix).

- ``rank_variables``: who am I, read from torchrun's, MPI's or Slurm's environment variables.
- ``slurm``: a one-node Slurm cluster started and stopped from a cell (``python -m dpedu.cluster.slurm``).
- ``troubleshooting``: communication errors triggered for real and shown readably.
- ``checkpoints``: checkpoints written whole or not at all, for restarts.
- ``circulating_code``: a snippet from an article run as written, as a plain script, a hang stopped and located
  (the appendix).
"""
