"""dpedu.runtime.traffic.bytes_sent on real gloo ranks: what each kind of call counts, byte for byte, whether it
comes from Python, from DDP's C++ reducer, from a communication hook, from a callback chained on a collective
or from DTensor; only inside its block, nested blocks included."""

import warnings

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu import launch
from dpedu.runtime.traffic import bytes_sent

# label: (kind, bytes rank 0 hands in, bytes rank 1 hands in), on 2 ranks. A "five" is 5 float32 (20 bytes),
# a "three" 3 float32 (12 bytes); outputs are never counted, inputs whole, a broadcast's on its root only.
EXPECTED = {
    "all_reduce": ("all_reduce", 20, 20),
    "all_reduce_coalesced": ("all_reduce", 32, 32),
    "reduce to rank 1": ("reduce", 20, 20),
    "all_gather": ("all_gather", 20, 20),
    "all_gather_into_tensor": ("all_gather", 20, 20),
    "all_gather_coalesced": ("all_gather", 32, 32),
    "all_gather_into_tensor, coalesced": ("all_gather", 32, 32),
    "gather to rank 0": ("gather", 20, 20),
    "reduce_scatter": ("reduce_scatter", 40, 40),
    "reduce_scatter_tensor": ("reduce_scatter", 40, 40),
    "reduce_scatter_tensor, coalesced": ("reduce_scatter", 64, 64),
    "all_to_all": ("all_to_all", 40, 40),
    "all_to_all_single": ("all_to_all", 40, 40),
    "broadcast from rank 1": ("broadcast", 0, 20),
    "scatter from rank 1": ("scatter", 0, 40),
    "functional all_reduce": ("all_reduce", 20, 20),
    "functional all_reduce, in place": ("all_reduce", 20, 20),
    "functional all_reduce_coalesced": ("all_reduce", 32, 32),
    "functional all_reduce_coalesced, in place": ("all_reduce", 32, 32),
    "functional all_gather_tensor": ("all_gather", 20, 20),
    "functional all_gather_tensor, into a tensor": ("all_gather", 20, 20),
    "functional all_gather_into_tensor_coalesced": ("all_gather", 32, 32),
    "functional reduce_scatter_tensor": ("reduce_scatter", 40, 40),
    "functional reduce_scatter_tensor, into a tensor": ("reduce_scatter", 40, 40),
    "functional reduce_scatter_tensor_coalesced": ("reduce_scatter", 64, 64),
    "functional all_to_all_single": ("all_to_all", 40, 40),
    "functional broadcast from rank 1": ("broadcast", 0, 20),
    "functional broadcast from rank 1, in place": ("broadcast", 0, 20),
    "DTensor 4 x 3, sharded by rows, made whole": ("all_gather", 24, 24),
    "DTensor 4 x 3, summed": ("all_reduce", 4, 4),
}


def every_kind() -> dict:
    rank, name, ops = dist.get_rank(), dist.group.WORLD.group_name, torch.ops._c10d_functional

    def five():
        return torch.ones(5)

    def three():
        return torch.ones(3)

    def ten():
        return torch.ones(10)

    def coalesced(collective, outputs, inputs):
        with dist._coalescing_manager():
            for output, tensor in zip(outputs, inputs, strict=True):
                collective(output, tensor, async_op=True)

    def in_place(op, tensor, *args):
        return ops.wait_tensor(op(tensor, *args, name))

    def each(tensors):
        return [tensor.wait() for tensor in tensors]

    world = dist.group.WORLD
    dtensor = distribute_tensor(torch.ones(4, 3), init_device_mesh("cpu", (2,)), [Shard(0)])
    calls = {
        "all_reduce": lambda: dist.all_reduce(five()),
        "all_reduce_coalesced": lambda: dist.all_reduce_coalesced([five(), three()]),
        "reduce to rank 1": lambda: dist.reduce(five(), dst=1),
        "all_gather": lambda: dist.all_gather([five(), five()], five()),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(ten(), five()),
        "all_gather_coalesced": lambda: dist.all_gather_coalesced([[five(), three()]] * 2, [five(), three()]),
        "all_gather_into_tensor, coalesced": lambda: coalesced(dist.all_gather_into_tensor, [ten(), torch.ones(6)],
                                                               [five(), three()]),
        "gather to rank 0": lambda: dist.gather(five(), [five(), five()] if rank == 0 else None, dst=0),
        "reduce_scatter": lambda: dist.reduce_scatter(five(), [five(), five()]),
        "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(five(), ten()),
        "reduce_scatter_tensor, coalesced": lambda: coalesced(dist.reduce_scatter_tensor, [five(), three()],
                                                              [ten(), torch.ones(6)]),
        "all_to_all": lambda: dist.all_to_all([five(), five()], [five(), five()]),
        "all_to_all_single": lambda: dist.all_to_all_single(ten(), ten()),
        "broadcast from rank 1": lambda: dist.broadcast(five(), src=1),
        "scatter from rank 1": lambda: dist.scatter(five(), [five(), five()] if rank == 1 else None, src=1),
        "functional all_reduce": lambda: funcol.all_reduce(five(), "sum", world).wait(),
        "functional all_reduce, in place": lambda: in_place(ops.all_reduce_, five(), "sum"),
        "functional all_reduce_coalesced": lambda: each(funcol.all_reduce_coalesced([five(), three()], "sum", world)),
        "functional all_reduce_coalesced, in place": lambda: ops.all_reduce_coalesced_([five(), three()], "sum", name),
        "functional all_gather_tensor": lambda: funcol.all_gather_tensor(five(), 0, world).wait(),
        "functional all_gather_tensor, into a tensor": lambda: ops.wait_tensor(
            ops.all_gather_into_tensor_out(five(), 2, name, out=ten())),
        "functional all_gather_into_tensor_coalesced": lambda: each(funcol.all_gather_into_tensor_coalesced(
            [five(), three()], world)),
        "functional reduce_scatter_tensor": lambda: funcol.reduce_scatter_tensor(ten(), "sum", 0, world).wait(),
        "functional reduce_scatter_tensor, into a tensor": lambda: ops.wait_tensor(
            ops.reduce_scatter_tensor_out(ten(), "sum", 2, name, out=five())),
        "functional reduce_scatter_tensor_coalesced": lambda: each(funcol.reduce_scatter_tensor_coalesced(
            [ten(), torch.ones(6)], "sum", [0, 0], world)),
        "functional all_to_all_single": lambda: funcol.all_to_all_single(ten(), None, None, world).wait(),
        "functional broadcast from rank 1": lambda: funcol.broadcast(five(), 1, world).wait(),
        "functional broadcast from rank 1, in place": lambda: in_place(ops.broadcast_, five(), 1),
        "DTensor 4 x 3, sharded by rows, made whole": dtensor.full_tensor,
        "DTensor 4 x 3, summed": lambda: dtensor.sum().full_tensor(),
    }
    counted = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # all_reduce_coalesced and all_gather_coalesced are deprecated
        for label, call in calls.items():
            with bytes_sent() as sent:
                call()
            counted[label] = sent.calls
    return counted


def test_each_kind_counts_what_this_rank_hands_in():
    ranks = launch(every_kind, 2)
    assert set(ranks[0]) == set(EXPECTED)
    for label, (kind, *per_rank) in EXPECTED.items():
        assert [r[label] for r in ranks] == [[(kind, nbytes)] for nbytes in per_rank], label


def point_to_point() -> tuple[list, list]:
    rank = dist.get_rank()
    with bytes_sent() as sent:
        if rank == 0:
            dist.send(torch.ones(5), 1)
            dist.isend(torch.ones(3), 1).wait()
            funcol.wait_tensor(funcol.isend_inplace(torch.ones(2), 1))
            dist.recv(torch.empty(7), 1)
        else:
            dist.recv(torch.empty(5), 0)
            dist.irecv(torch.empty(3), 0).wait()
            funcol.wait_tensor(funcol.irecv_inplace(torch.empty(2), 0))
            dist.send(torch.ones(7), 0)
    with bytes_sent() as both_first:  # both ranks send before they receive: the sends must stay asynchronous
        peer, large = 1 - rank, 2**20
        requests = [dist.isend(torch.ones(large), peer), dist.irecv(torch.empty(large), peer)]
        for request in requests:
            request.wait()
    return sent.calls, both_first.calls


def test_sends_count_their_tensor_and_receives_nothing():
    (zero, zero_both), (one, one_both) = launch(point_to_point, 2, timeout=60)
    assert zero == [("send", 20), ("send", 12), ("send", 8)] and one == [("send", 28)]
    assert zero_both == one_both == [("send", 4 * 2**20)]


def ddp_steps(hook) -> list[list]:
    torch.manual_seed(0)
    model = DDP(nn.Linear(10, 6))  # 66 parameters, 264 bytes in float32: one bucket
    if hook is not None:
        model.register_comm_hook(None, hook)
    steps = []
    for _ in range(3):
        with bytes_sent() as sent:
            model(torch.ones(2, 10)).sum().backward()
        steps.append(sent.calls)
    return steps


def test_ddp_s_own_all_reduce_from_c_plus_plus_and_a_hook_s():
    plain, hooked = launch(ddp_steps, 2, args=(None,)), launch(ddp_steps, 2, args=(default_hooks.fp16_compress_hook,))
    for rank in (0, 1):
        # In its second forward DDP broadcasts from rank 0 the bucket order it settled on in the first
        # backward: one int32 per parameter and their count (12 bytes), then the bucket's size (4).
        order = [("broadcast", 12 if rank == 0 else 0), ("broadcast", 4 if rank == 0 else 0)]
        assert plain[rank] == [[("all_reduce", 264)], [*order, ("all_reduce", 264)], [("all_reduce", 264)]]
        assert hooked[rank] == [[("all_reduce", 132)], [*order, ("all_reduce", 132)], [("all_reduce", 132)]]


def chained_and_nested() -> tuple:
    with bytes_sent() as outer:
        first = dist.all_reduce(torch.ones(5), async_op=True).get_future()
        first.then(lambda _: dist.all_reduce(torch.ones(3))).wait()  # sent from the callback
        with bytes_sent() as inner:
            dist.broadcast(torch.ones(3, dtype=torch.float64), src=0)
    dist.all_reduce(torch.ones(7))  # after both blocks: not counted
    return outer.calls, outer.bytes, outer.by_kind(), inner.calls


def test_callbacks_are_counted_and_blocks_nest():
    zero, one = launch(chained_and_nested, 2)
    assert zero == ([("all_reduce", 20), ("all_reduce", 12), ("broadcast", 24)], 56,
                    {"all_reduce": 32, "broadcast": 24}, [("broadcast", 24)])
    assert one == ([("all_reduce", 20), ("all_reduce", 12), ("broadcast", 0)], 32,
                   {"all_reduce": 32, "broadcast": 0}, [("broadcast", 0)])
