"""captured_stderr: what C++ writes to file descriptor 2 is caught, its warnings parsed, the descriptor put back."""

import os

import pytest

from dpedu.runtime.stderr import captured_stderr


def test_captured_stderr_keeps_what_cpp_writes_and_puts_the_descriptor_back(capfd):
    with captured_stderr() as caught:
        os.write(2, b"[rank0]:[W1125 09:09:27.95 reducer.cpp:1529] Warning: a flag costs time (function operator())\n")
        os.write(2, b"[rank0]:[W1125 09:09:28.01 reducer.cpp:1529] Warning: a flag costs time (function operator())\n")
        os.write(2, b"plain text\n")
    assert caught.text.count("\n") == 3 and caught.warnings() == ["a flag costs time"]
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_captured_stderr_restores_the_descriptor_after_an_exception(capfd):
    with pytest.raises(KeyError), captured_stderr() as caught:
        os.write(2, b"before the error\n")
        raise KeyError("x")
    assert caught.text == "before the error\n"
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "before the error\nafter\n"  # what was caught is shown, not lost
