"""The first code cell of every notebook: what happens when a lesson is opened alone, outside a clone.

Colab's "open from GitHub", Kaggle and most JupyterHubs give a learner one notebook and whatever packages
the image has. That cell cannot use dpedu to install dpedu, so it is plain Python, kept here as the one
source and written into every notebook by ``python -m dpedu.notebook.opened_alone`` (a test checks that
the notebooks hold exactly ``FIRST_CELL``). With dpedu installed it does nothing. Without it:
- in Colab and Kaggle it installs dpedu from the first source it finds: ``DPEDU_SOURCE`` (anything pip
  takes), a ``dpedu-*.whl`` uploaded next to the notebook or added to Kaggle as a dataset (under
  /kaggle/input), or ``PUBLISHED_AT``;
- anywhere else, or with no source, it stops "Run All" with one line saying what to run.
An environment whose torch is older than the course's lower bound is told so first, everywhere: installing
dpedu there would replace its torch.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

# Where the course is published for pip ("git+https://…" or a package name). None until it is published:
# then the README's "Where the course lives" and pyproject.toml's [project.urls] name the same place.
PUBLISHED_AT: str | None = None
VERSION = "0.1.0"  # pyproject.toml's version: the wheel `./course wheel` builds is named after it
WHEEL = f"dpedu-{VERSION}-py3-none-any.whl"
HOSTED = ("COLAB_RELEASE_TAG", "KAGGLE_KERNEL_RUN_TYPE")  # set in every Colab and Kaggle kernel
# The oldest torch the course supports, as requirements.txt and pyproject.toml ask for it (a test keeps the
# three in step). An image with an older torch is told so: installing dpedu would replace its torch.
TORCH_LOWEST = (2, 12)
INSTRUCTION = (f"dpedu is not installed here: run `%pip install {WHEEL}` (the wheel `./course wheel` builds in a "
               "clone of the course, uploaded next to this notebook), or open the course with `./course lab` in a "
               "clone; then run this cell again (if it still says this, restart the kernel first).")


def _wrapped(text: str, indent: int, width: int = 90) -> str:
    """``text`` as adjacent string literals of at most ``width`` characters each, one per line."""
    pieces, piece = [], ""
    for word in text.split(" "):
        if piece and len(piece) + len(word) + 1 > width:
            pieces.append(piece + " ")
            piece = word
        else:
            piece = f"{piece} {word}" if piece else word
    pieces.append(piece)
    return ("\n" + " " * indent).join(f'"{p}"' for p in pieces)


FIRST_CELL = f"""\
# The course's helper package. In a clone, `./course lab` installs it. Opened alone, in Colab or
# Kaggle this cell installs it; anywhere else it says what to run (README: "Without installing anything").
try:
    import dpedu  # noqa: F401
except ModuleNotFoundError:
    import glob
    import importlib
    import os
    import subprocess
    import sys
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:  # no torch at all: installing dpedu brings one
        torch_version = None
    if torch_version and tuple(int(part) for part in torch_version.split(".")[:2]) < {TORCH_LOWEST!r}:  # keep it
        raise SystemExit(f"This environment's torch {{torch_version}} is older than the course's "
                         "{".".join(map(str, TORCH_LOWEST))}, and installing dpedu would replace it: use a newer image "
                         "(README: Which torch).") from None
    wheels = sorted(glob.glob("dpedu-*.whl") + glob.glob("/kaggle/input/**/dpedu-*.whl", recursive=True))
    source = os.environ.get("DPEDU_SOURCE") or (wheels[-1] if wheels else {PUBLISHED_AT!r})
    if not (source and ({" or ".join(f'"{name}" in os.environ' for name in HOSTED)})):
        raise SystemExit({_wrapped(INSTRUCTION, 25)}) from None
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--root-user-action=ignore", source], capture_output=True, text=True)  # hosted: root
    if pip.returncode != 0:
        raise SystemExit("pip could not install dpedu (on Kaggle, turn Internet on in the notebook's settings):\\n"
                         + "\\n".join(pip.stderr.strip().splitlines()[-5:])) from None
    importlib.invalidate_caches()
    import dpedu  # noqa: F401"""


def first_code_cell(notebook: dict) -> dict | None:
    """The first code cell of a notebook read as JSON (nbformat 4), or None if it has none."""
    return next((cell for cell in notebook["cells"] if cell["cell_type"] == "code"), None)


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def rewrite(path: str | Path) -> bool:
    """Make ``FIRST_CELL`` the notebook's first code cell (inserted before it, or updated); True if changed.
    The file is written as Jupyter writes it (one-space indent, keys sorted)."""
    path = Path(path)
    notebook = json.loads(path.read_text(encoding="utf-8"))
    first = first_code_cell(notebook)
    if first is not None and source(first) == FIRST_CELL:
        return False
    lines = FIRST_CELL.splitlines(keepends=True)
    if first is not None and source(first).startswith(FIRST_CELL.splitlines()[0]):
        first["source"] = lines  # an older version of this cell
    else:
        cell = {"cell_type": "code", "execution_count": None, "id": uuid.uuid4().hex[:8], "metadata": {},
                "outputs": [], "source": lines}
        at = notebook["cells"].index(first) if first is not None else len(notebook["cells"])
        notebook["cells"].insert(at, cell)
    path.write_text(json.dumps(notebook, sort_keys=True, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


if __name__ == "__main__":  # python -m dpedu.notebook.opened_alone notebooks/*.ipynb
    for name in sys.argv[1:]:
        print(f"{name}: {'rewritten' if rewrite(name) else 'already up to date'}")
