import time

import torch
import torch.distributed as dist

from dpedu.cluster.troubleshooting import observe, readable
from dpedu.runtime.failures import leftover_processes


def _returns_rank():
    print("hello")
    return dist.get_rank()


def _raises_on_rank_1():
    if dist.get_rank() == 1:
        raise ValueError("rank 1 is unhappy")


def _aborts_on_mismatched_shapes():
    dist.all_reduce(torch.ones(4 + dist.get_rank()))


def _waits_for_nobody():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
    else:
        time.sleep(30)


def test_a_run_that_returns_gives_the_results_and_the_captured_output(capsys):
    outcome = observe(_returns_rank, 2)
    assert outcome.ending == "returned" and outcome.results == [0, 1] and outcome.error == ""
    assert "[rank 0] hello" in outcome.printed and "[rank 1] hello" in outcome.printed
    assert capsys.readouterr().out == ""  # captured, not shown


def test_an_exception_is_reported_with_its_rank_not_raised():
    outcome = observe(_raises_on_rank_1, 2)
    assert outcome.ending == "raised" and outcome.results is None
    assert outcome.error.startswith("rank 1: ValueError: rank 1 is unhappy")


def test_a_crash_is_reported_with_the_signal_and_what_the_rank_printed():
    outcome = observe(_aborts_on_mismatched_shapes, 2)
    assert outcome.ending == "crashed" and "SIGABRT" in outcome.error
    assert outcome.lines("Received data size doesn't match expected size")
    assert "enforce fail at" not in outcome.printed  # the wheel's build paths are left out
    assert leftover_processes() == []


def test_a_hang_is_stopped_at_the_timeout_and_says_where_each_rank_was():
    start = time.perf_counter()
    outcome = observe(_waits_for_nobody, 2, timeout=2)
    assert outcome.ending == "hung" and time.perf_counter() - start < 10
    assert "rank 0 was in all_reduce" in outcome.error
    assert leftover_processes() == []


def test_readable_drops_source_locations_and_tensor_options():
    message = ("[/__w/pytorch/third_party/gloo/x.cc:78] Timed out. CollectiveFingerPrint(OpType=ALLREDUCE, "
               "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu, layout=Strided (default), "
               "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))).")
    assert readable(message) == "Timed out. CollectiveFingerPrint(OpType=ALLREDUCE, TensorDeviceTypes=cpu)."
