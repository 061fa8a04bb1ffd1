"""Lesson 09's Slurm cell prints the batch job's output file as stored, less srun's notices that a step waited for
the job's previous one, which a busy machine adds: the cell's own line leaves out those notices and nothing else
(srun's errors stay)."""

import re

from claims.lesson_cells import code_cell


def leave_out_notices(output: str) -> str:
    source = code_cell("09_scaling_out.ipynb", "slurm_train.sbatch", "job_checksum")
    [line] = re.findall(r"^output = re\.sub\(.*?\n(?:\s+r\".*\n)*", source, re.M)
    namespace = {"re": re, "output": output}
    exec(compile(line, "lesson 09, the Slurm cell", "exec"), namespace)
    return namespace["output"]


def test_srun_waiting_for_the_previous_step_is_left_out_and_its_errors_are_not():
    job = ("task 0: job 1, node 0 (localhost) of 1\nrendezvous host: localhost\n"
           "srun: Job 1 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
           "srun: Step created for job 1\n2 rank(s) on gloo\n")
    assert leave_out_notices(job) == ("task 0: job 1, node 0 (localhost) of 1\nrendezvous host: localhost\n"
                                      "2 rank(s) on gloo\n")
    failed = ("srun: Job 7 step creation temporarily disabled, retrying (Memory required by task is not available)\n"
              "srun: error: localhost: task 0: Exited with exit code 1\n")
    assert leave_out_notices(failed) == failed
