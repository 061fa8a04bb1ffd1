import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import dpedu
from dpedu.exercises import lesson14


def test_examples_per_step_check():
    assert lesson14.examples_per_step(8, 4, 3, 96) and lesson14.examples_per_step(16, 2, 2, 64)
    assert not lesson14.examples_per_step(8, 4, 3, 32) and not lesson14.examples_per_step(8, 4, 3, 24)


def _gathered_by_accelerate(examples: int, batch: int) -> list[int]:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(examples)), batch_size=batch))
    counts = [0, 0]
    for (index,) in loader:
        counts[0] += len(accelerator.gather(index))
        counts[1] += len(accelerator.gather_for_metrics(index))
    return counts


@pytest.mark.parametrize("examples,batch", [(359, 64), (359, 50), (10, 4), (9, 4), (3, 4), (256, 64)])
def test_gathered_check_agrees_with_accelerate(examples, batch):
    gather, for_metrics = dpedu.launch(_gathered_by_accelerate, 2, (examples, batch))[0]
    assert for_metrics == examples
    assert lesson14.gathered(examples, batch, 2, gather)
    assert not lesson14.gathered(examples, batch, 2, gather + 1)


def test_gathered_check_by_hand():
    assert lesson14.gathered(359, 50, 4, 400) and lesson14.gathered(359, 64, 2, 384)
    assert not lesson14.gathered(359, 50, 4, 359)


def test_twice_divided_check():
    assert lesson14.twice_divided_lr(0.05, 2, 0.025) and lesson14.twice_divided_lr(0.1, 4, 0.025)
    assert not lesson14.twice_divided_lr(0.05, 2, 0.05) and not lesson14.twice_divided_lr(0.05, 2, 0.0125)


@pytest.mark.parametrize("answer", ["96", True, None])
def test_checks_refuse_non_numbers(answer):
    for check, args in ((lesson14.examples_per_step, (8, 4, 3)), (lesson14.gathered, (359, 50, 4)),
                        (lesson14.twice_divided_lr, (0.05, 2))):
        with pytest.raises(TypeError, match="answer must be a number"):
            check(*args, answer)


def test_checks_name_bad_arguments():
    with pytest.raises(ValueError, match="processes"):
        lesson14.examples_per_step(8, 4, 0, 0)
    with pytest.raises(ValueError, match="batch"):
        lesson14.gathered(359, 0, 2, 0)
    with pytest.raises(ValueError, match="lr"):
        lesson14.twice_divided_lr(-1.0, 2, 0.5)
