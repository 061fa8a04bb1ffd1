"""The lessons count GPUs one way, ``dpedu.gpu_count()``: where NVML lists GPUs that CUDA cannot start (a driver
too old for this torch), ``torch.cuda.device_count()`` still counts them, and a lesson that trusted it took the GPU
branch and crashed instead of running on CPU ranks as the README promises. ``torch.cuda.is_available()`` starts
CUDA in the kernel, after which no rank may be forked from it."""

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OTHER_WAYS = ("device_count", "is_available")  # of torch.cuda
# Lesson 00 checks that its environment report agrees with NVML's own count: comparing the two is the point.
ALLOWED = {("00_welcome", "assert len(report.gpus) == torch.cuda.device_count()")}


def counted_in_the_kernel(source: str) -> list[str]:
    """The lines of a code cell that ask torch.cuda for GPUs in the kernel itself: not inside a function (which
    runs in a rank, where CUDA may start) and not in a string (a script the lesson runs)."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    tree = ast.parse(code)
    inside_functions = {id(node) for function in ast.walk(tree) if isinstance(function, ast.FunctionDef | ast.Lambda)
                        for node in ast.walk(function)}
    lines = code.splitlines()
    return [lines[node.lineno - 1].split("#")[0].strip() for node in ast.walk(tree)
            if isinstance(node, ast.Call) and id(node) not in inside_functions
            and isinstance(node.func, ast.Attribute) and node.func.attr in OTHER_WAYS
            and ast.unparse(node.func.value) == "torch.cuda"]


def test_the_check_finds_a_count_in_the_kernel_and_leaves_ranks_and_scripts_alone():
    counted = "gpus = torch.cuda.device_count()"
    assert counted_in_the_kernel(f"{counted}  # NVML\nif gpus: pass") == [counted]
    assert counted_in_the_kernel("ok = torch.cuda.is_available()") == ["ok = torch.cuda.is_available()"]
    assert counted_in_the_kernel("def in_rank():\n    return torch.cuda.is_available()") == []
    assert counted_in_the_kernel('SCRIPT = """\nprint(torch.cuda.device_count())\n"""') == []
    assert counted_in_the_kernel("gpus = dpedu.gpu_count()") == []


def test_no_lesson_counts_gpus_in_the_kernel_but_through_dpedu():
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                found += [(path.stem, line) for line in counted_in_the_kernel("".join(cell["source"]))
                          if (path.stem, line) not in ALLOWED]
    assert found == []
