"""Every script's bad options are refused by its ``arguments`` (the first thing its main does, before any process
group or rank exists) with exit code 2 and a message naming the option."""

import pytest

from dpedu.scripts import train_addition, train_elastic, train_resumable


@pytest.mark.parametrize(("script", "arguments", "message"), [
    (train_addition, ["--steps", "0"], "--steps must be >= 1, got 0"),
    (train_addition, ["--eval-every", "-1"], "--eval-every must be >= 0, got -1"),
    (train_addition, ["--warmup", "1000"], "--warmup must be smaller than --steps, got 1000 >= 1000"),
    (train_addition, ["--resume"], "--resume and --checkpoint-every need --checkpoint FILE"),
    (train_addition, ["--stop-after-step", "1000"], "--stop-after-step must be from 1 to --steps - 1 = 999"),
    (train_addition, ["--precision", "half"], "argument --precision: invalid choice: 'half'"),
    (train_resumable, ["--checkpoint", "c.pt", "--kill-rank", "0"], "--kill-rank and --kill-at-step go together"),
    (train_resumable, ["--checkpoint", "c.pt", "--checkpoint-every", "0"],
     "--steps must be >= 0 and --checkpoint-every >= 1"),
    (train_elastic, ["--checkpoint", "c.pt", "--wait-at-step", "5"], "--wait-at-step and --full-world go together"),
    (train_elastic, ["--checkpoint", "c.pt", "--leave-at-step", "0"], "must be >= 1"),
    (train_elastic, ["--checkpoint", "c.pt", "--global-batch-size", "0"], "--global-batch-size >= 1"),
], ids=lambda value: value.__name__.rsplit(".", 1)[-1] if hasattr(value, "__name__") else None)
def test_bad_options_are_refused_before_any_process_group(script, arguments, message, capsys):
    with pytest.raises(SystemExit) as exit:
        script.arguments(arguments)
    assert exit.value.code == 2 and message in capsys.readouterr().err
