"""The bf16 hook gloo accepts, and the payload counted per DDP bucket call, PowerSGD's follow-ups included."""

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD

from dpedu import launch
from dpedu.data_parallel import digits_ddp
from dpedu.data_parallel.compression import bf16_allreduce_hook, payload_bytes

MODEL_BYTES = (64 * 32 + 32 + 32 * 10 + 10) * 4  # digits_ddp.train's digits MLP, float32: one bucket


def train_counted(name):
    hook, state = {"fp32": (default_hooks.allreduce_hook, None), "bf16": (bf16_allreduce_hook, None),
                   "powerSGD": (powerSGD.powerSGD_hook, powerSGD.PowerSGDState(None, matrix_approximation_rank=1,
                                                                               start_powerSGD_iter=2))}[name]
    with payload_bytes() as payload:
        trained = digits_ddp.train(steps=4, batch_size=16, lr=0.1, comm_hook=payload.counted(hook), comm_state=state)
    return payload.per_call(), trained["model"], payload.per_call_messages()


def test_bytes_per_step_and_the_same_training_within_bf16_rounding():
    (fp32_calls, fp32_model, fp32_messages), (fp32_rank_1, *_) = launch(train_counted, 2, args=("fp32",))
    (bf16_calls, bf16_model, _), _ = launch(train_counted, 2, args=("bf16",))
    (power_calls, _, power_messages), _ = launch(train_counted, 2, args=("powerSGD",))
    # Step 1 also holds what DDP's second forward broadcasts from rank 0: the bucket order it settled on,
    # an int32 per parameter and their count (20 bytes), and the bucket's size (4). Rank 1 only receives it.
    order = 24
    assert fp32_calls == [MODEL_BYTES + order] + [MODEL_BYTES] * 3 and fp32_rank_1 == [MODEL_BYTES] * 4
    assert bf16_calls == [MODEL_BYTES // 2 + order] + [MODEL_BYTES // 2] * 3
    rank_1 = (64 + 32) + (32 + 10)  # P and Q of each weight matrix, rank 1
    # sent from callbacks once the previous all-reduce has arrived, + the biases, uncompressed
    assert power_calls == [MODEL_BYTES + order, MODEL_BYTES] + [(rank_1 + 32 + 10) * 4] * 2
    # message by message: the sums above, split; PowerSGD's three all-reduces in turn: biases, Ps, Qs
    assert fp32_messages[1:] == [[MODEL_BYTES]] * 3 and sum(fp32_messages[0]) == fp32_calls[0]
    assert power_messages[2:] == [[(32 + 10) * 4, (32 + 10) * 4, (64 + 32) * 4]] * 2
    assert all(torch.allclose(fp32_model[k], bf16_model[k], atol=1e-2) for k in fp32_model)
