"""The lessons on a machine that is not idle: green, or saying why a timing claim cannot be shown.

    .venv/bin/python benchmarks/busy_machine.py --busy-core [notebooks/04_*.ipynb ...]
    .venv/bin/python benchmarks/busy_machine.py --class 05 12 13

--busy-core: another program keeps one core busy (a Python loop at normal priority, as a browser tab or
  an indexer would) while the notebooks run one after the other under strict nbval; by default the
  lessons that assert times (01, 04, 05, 08, 11, 12, 13).
--class: several learners at once: each named lesson runs under strict nbval in a process of its own, all
  started together, as on a class server where learners run the same heavy cells at the same moment.
Either way every run must pass: a timing claim the machine cannot show prints why instead of failing.
Prints each run's time and the timing claims left unchecked (machine_load records each one in the file
DPEDU_UNCHECKED_CLAIMS names);
exits non-zero if any run failed. CI runs both (.ci/run); wall times vary with the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMED_LESSONS = ["01", "04", "05", "08", "11", "12", "13"]
NBVAL = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval", "--nbval-cell-timeout=300",
         "--nbval-sanitize-with", "nbval_sanitize.cfg", "--timeout=900"]


def notebook(lesson: str) -> Path:
    found = sorted((ROOT / "notebooks").glob(f"{lesson}_*.ipynb")) if len(lesson) == 2 else [Path(lesson)]
    if len(found) != 1 or not found[0].is_file():
        raise SystemExit(f"lesson {lesson!r} names no notebook")
    return found[0].resolve()


def start(notebook: Path, work: Path) -> tuple[subprocess.Popen, Path]:
    """nbval on a copy of ``notebook`` in a folder of its own below ``work``, its output to a log file there."""
    folder = work / notebook.stem
    folder.mkdir()
    copy = Path(shutil.copy2(notebook, folder))
    log = folder / "nbval.log"
    env = {**os.environ, "DPEDU_STATIC": "1", "DPEDU_QUIET": "1", "PYTHONUNBUFFERED": "1",
           "DPEDU_UNCHECKED_CLAIMS": str(folder / "unchecked.txt")}  # machine_load writes each claim it could not check
    with open(log, "w") as out:
        process = subprocess.Popen([*NBVAL, str(copy.relative_to(work))], cwd=work, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    return process, log


def report(name: str, process: subprocess.Popen, log: Path, seconds: float) -> bool:
    text = log.read_text()
    record = log.with_name("unchecked.txt")
    unchecked = record.read_text().splitlines() if record.exists() else []
    summary = (text.strip().splitlines() or ["(no output)"])[-1]
    print(f"{name}: {'passed' if process.returncode == 0 else 'FAILED'} in {seconds:.0f} s ({summary}); "
          f"timing claims not checked: {len(unchecked)}{': ' if unchecked else ''}{'; '.join(unchecked)}", flush=True)
    if process.returncode != 0:
        print(text[-6000:], flush=True)
    return process.returncode == 0


def run(notebooks: list[Path], together: bool, busy_core: bool) -> bool:
    work = Path(tempfile.mkdtemp(prefix="busy-machine-"))
    (work / "pytest.ini").write_text("[pytest]\n")  # the copies' own configuration, none of the repository's
    shutil.copy2(ROOT / "tests" / "nbval_sanitize.cfg", work)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy_core else None
    running: list[subprocess.Popen] = []
    try:
        ok = True
        if together:
            began = time.perf_counter()
            started = [(nb, *start(nb, work)) for nb in notebooks]
            running = [process for _, process, _ in started]
            for nb, process, log in started:
                process.wait(timeout=1800)
                ok &= report(nb.stem, process, log, time.perf_counter() - began)
        else:
            for nb in notebooks:
                began = time.perf_counter()
                process, log = start(nb, work)
                running = [process]
                process.wait(timeout=1800)
                ok &= report(nb.stem, process, log, time.perf_counter() - began)
        return ok
    finally:
        for process in [*running, *([hog] if hog else [])]:
            if process.poll() is None:
                process.kill()
            process.wait()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--busy-core", action="store_true", help="one core kept busy; the lessons one by one")
    mode.add_argument("--class", dest="together", action="store_true", help="the lessons all at once")
    parser.add_argument("lessons", nargs="*", help="lesson numbers (04) or notebook paths; default: " +
                        " ".join(TIMED_LESSONS))
    options = parser.parse_args()
    notebooks = [notebook(lesson) for lesson in options.lessons or TIMED_LESSONS]
    what = "with one core kept busy" if options.busy_core else "all at once"
    print(f"=== {len(notebooks)} lesson(s) under strict nbval, {what}, on {os.cpu_count()} cores", flush=True)
    return 0 if run(notebooks, options.together, options.busy_core) else 1


if __name__ == "__main__":
    sys.exit(main())
