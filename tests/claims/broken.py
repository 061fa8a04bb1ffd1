"""Broken subjects for the claims tests: the course's own code with one line changed, and put in its place for
a while, so that a test breaks exactly what the lesson shows and no hand-made number stands in for it."""

import __future__

import inspect
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager


def changed(obj, *edits: tuple[str, str]):
    """``obj`` (a function or class) rebuilt from its source with each (old, new) edit, in a copy of its module's
    namespace (the module itself is left alone). Each ``old`` must occur once, so a test follows the code."""
    source = textwrap.dedent(inspect.getsource(obj))
    for old, new in edits:
        assert source.count(old) == 1, f"{old!r} is not in {obj.__qualname__} once: update this test to the code"
        source = source.replace(old, new)
    namespace = dict(vars(inspect.getmodule(obj)))
    exec(compile(source, f"{obj.__qualname__}, broken", "exec", flags=__future__.annotations.compiler_flag,
                 dont_inherit=True), namespace)
    return namespace[obj.__name__]


@contextmanager
def replaced(module, name: str, value) -> Iterator[None]:
    """``module.name`` is ``value`` inside the block (used inside a rank: the caller's process is untouched)."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)
