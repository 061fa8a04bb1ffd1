"""The first code cell of every notebook: what happens when a lesson is opened alone, outside a clone.

Colab's "open from GitHub", Kaggle and most JupyterHubs give a learner one notebook and whatever packages
the image has. That cell cannot use dpedu to install dpedu, so it is plain Python, kept here as the one
source and written into every notebook by ``python -m dpedu.notebook.opened_alone`` (a test checks that
the notebooks hold exactly ``FIRST_CELL``). With dpedu at the notebooks' version or later it does nothing.
Otherwise it stops "Run All" with one line saying what to do, or installs dpedu itself:
- an environment whose torch is older than the course's lower bound is told so first, everywhere
  (installing dpedu would replace that torch): in Colab and Kaggle with the upgrade and the restart;
- a kernel without dpedu where the course's kernel is registered is told to switch to it;
- in Colab and Kaggle it installs dpedu from the first source it finds: ``DPEDU_SOURCE`` (anything pip
  takes), the newest ``dpedu-*.whl`` uploaded next to the notebook (Colab: /content, or the top of a
  mounted Drive) or added to Kaggle as a dataset (under /kaggle/input), or ``PUBLISHED_AT``; without one,
  each says where its wheel goes;
- a dpedu older than the notebooks (a wheel built before the course changed) is told to reinstall.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

from dpedu import __version__ as VERSION

# Where the course is published for pip ("git+https://…" or a package name). None until it is published:
# then the README's "Where the course lives" and pyproject.toml's [project.urls] name the same place.
PUBLISHED_AT: str | None = None
WHEEL = f"dpedu-{VERSION}-py3-none-any.whl"  # what `./course wheel` builds
HOSTED = ("COLAB_RELEASE_TAG", "KAGGLE_KERNEL_RUN_TYPE")  # set in every Colab and Kaggle kernel
# The oldest torch the course supports, as requirements.txt and pyproject.toml ask for it (a test keeps the
# three in step). An image with an older torch is told so: installing dpedu would replace its torch.
TORCH_LOWEST = (2, 12)
_LOWEST = ".".join(map(str, TORCH_LOWEST))
BUILD = "`./course wheel` builds it in a clone of the course"
INSTRUCTION = (f"dpedu is not installed here: run `%pip install {WHEEL}` ({BUILD}; upload it next to this notebook), "
               "or open the course with `./course lab` in a clone; then run this cell again (if it still says "
               "this, restart the kernel first).")
NO_WHEEL = {
    "Colab": f"dpedu is not installed here: upload {WHEEL} ({BUILD}) in the Files pane on the left, once "
             "connected (it lands in /content and goes when the runtime is recycled), or put it at the top of "
             "your Drive and mount Drive; then run this cell again.",
    "Kaggle": f"dpedu is not installed here: add {WHEEL} ({BUILD}) as a dataset (Add Input, Upload; it appears "
              "under /kaggle/input), turn Internet on in the notebook's settings (dpedu brings MPI's wheels), "
              "then run this cell again.",
}
OLD_TORCH = (f"This environment's torch {{torch_version}} is older than the course's {_LOWEST}, and installing dpedu "
             "would replace it: use an environment with a newer torch (README: Which torch).")
OLD_TORCH_HOSTED = (f"This runtime's torch {{torch_version}} is older than the course's {_LOWEST}: run `%pip install "
                    f"'torch>={_LOWEST}'` in a cell, restart (Colab: Runtime, Restart session; Kaggle: Run, "
                    "Restart & clear cell outputs), then run this cell again.")
OTHER_KERNEL = ("This notebook runs on a kernel without dpedu, and the course's kernel is installed here: pick "
                "'Python (dpedu course)' (Kernel, Change Kernel), then run this cell again.")
STALE = (f"This lesson needs dpedu {VERSION} or later, and this kernel has {{dpedu_version}}. If the course was "
         "updated since this kernel started, restart the kernel; otherwise install a wheel built from the course as "
         f"it is now (`./course wheel`): `%pip install {WHEEL}`, then restart the kernel and run this cell again.")
NOT_A_PACKAGE = ("This kernel has no dpedu: `import dpedu` found only the folder {list(dpedu.__path__)[0]}, which "
                 "is not the course's package. Pick the kernel 'Python (dpedu course)' (Kernel, Change Kernel), or "
                 "install dpedu (README: Without installing anything), then restart the kernel.")


def _wrapped(text: str, indent: int, width: int = 80) -> str:
    """``text`` as adjacent string literals of at most ``width`` characters each, one per line (an f-string
    where ``text`` holds a {name})."""
    pieces, piece = [], ""
    for word in text.split(" "):
        if piece and len(piece) + len(word) + 1 > width:
            pieces.append(piece + " ")
            piece = word
        else:
            piece = f"{piece} {word}" if piece else word
    pieces.append(piece)
    return ("\n" + " " * indent).join(f'{"f" if "{" in p else ""}"{p}"' for p in pieces)


_BEGINNING = "# The course's helper package"  # how every version of the cell begins
FIRST_CELL = f"""\
# The course's helper package, dpedu {VERSION} or later. In a clone, `./course lab` installs it. Opened alone,
# in Colab or Kaggle this cell installs it; anywhere else it says what to run (README: "Without installing
# anything").
import re

try:
    import dpedu
except ModuleNotFoundError:
    import glob
    import importlib
    import os
    import subprocess
    import sys
    from importlib.metadata import PackageNotFoundError, version

    hosted = next((host for host, variable in (("Colab", "{HOSTED[0]}"), ("Kaggle", "{HOSTED[1]}"))
                   if variable in os.environ), None)
    try:
        torch_version = version("torch")
    except PackageNotFoundError:  # no torch at all: installing dpedu brings one
        torch_version = None
    if torch_version and tuple(int(part) for part in torch_version.split(".")[:2]) < {TORCH_LOWEST!r}:  # keep it
        raise SystemExit({_wrapped(OLD_TORCH_HOSTED, 25)} if hosted else
                         {_wrapped(OLD_TORCH, 25)}) from None
    try:  # the course's kernel, registered by `./course kernel`, but this notebook runs on another
        from jupyter_core.paths import jupyter_path

        other_kernel = any(os.path.exists(os.path.join(folder, "dpedu", "kernel.json"))
                           for folder in jupyter_path("kernels"))
    except ImportError:
        other_kernel = False
    if other_kernel and not hosted:
        raise SystemExit({_wrapped(OTHER_KERNEL, 25)}) from None
    wheels = {{tuple(int(part) for part in named.group(1).split(".")): path  # the newest by version, not by name
              for path in glob.glob("dpedu-*.whl") + glob.glob("/content/drive/MyDrive/dpedu-*.whl")
              + glob.glob("/kaggle/input/**/dpedu-*.whl", recursive=True)
              if (named := re.match(r"dpedu-(\\d+(?:\\.\\d+)*)-.+\\.whl$", os.path.basename(path)))}}
    source = os.environ.get("DPEDU_SOURCE") or (wheels[max(wheels)] if wheels else {PUBLISHED_AT!r})
    if not (source and hosted):
        if hosted == "Colab":
            raise SystemExit({_wrapped(NO_WHEEL["Colab"], 29)}) from None
        if hosted == "Kaggle":
            raise SystemExit({_wrapped(NO_WHEEL["Kaggle"], 29)}) from None
        raise SystemExit({_wrapped(INSTRUCTION, 25)}) from None
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "--root-user-action=ignore", source], capture_output=True, text=True)  # hosted: root
    if pip.returncode != 0:
        raise SystemExit("pip could not install dpedu (on Kaggle, turn Internet on in the notebook's settings):\\n"
                         + "\\n".join(pip.stderr.strip().splitlines()[-5:])) from None
    importlib.invalidate_caches()
    import dpedu
if getattr(dpedu, "__file__", None) is None:  # a folder named dpedu where the kernel started, no package
    raise SystemExit({_wrapped(NOT_A_PACKAGE, 21)})
dpedu_version = getattr(dpedu, "__version__", "0.1.0")  # 0.1.0, the first, had none
dpedu_parts = re.findall(r"\\d+", dpedu_version.split("+")[0])  # "0.3.0.dev1" and "0.2" read as 0.3.0 and 0.2.0
if (tuple(int(part) for part in dpedu_parts[:3]) + (0, 0))[:3] < {tuple(map(int, VERSION.split('.')))!r}:
    raise SystemExit({_wrapped(STALE, 21)})"""


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
    if first is not None and source(first).startswith(_BEGINNING):
        first["source"] = lines  # an older version of this cell: its id and metadata are kept
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
