"""Compare a notebook run elsewhere (in JupyterLab, by the browser test) with the outputs stored in the repo.

nbval runs a notebook in a kernel of its own and compares each cell's outputs with the stored ones. The
browser test already runs every notebook once, as a learner does; comparing what that run saved, by the
same rules, spares a second execution of the whole course. The rules are nbval's, through its own
helpers where it has them (comment markers and tags, stream joining, the sanitize file's parser):
streams of one name are joined, rich outputs are compared by MIME type, images and widget models are
not compared (their bytes and ids legitimately change), the patterns of ``nbval_sanitize.cfg`` are
replaced first, and a cell marked ``nbval-ignore-output`` or ``# NBVAL_IGNORE_OUTPUT`` is not compared.

One difference is deliberate: the browser runs the notebook with live widgets, so a display that holds
an image or a widget (a figure, an explorer, a progress bar) is left out on both sides, where nbval,
running with static explorers, compares such a display's plain-text part ("<Figure size ...>").
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbformat.v4.rwbase import rejoin_lines
from nbval.plugin import coalesce_streams, find_comment_markers, find_metadata_tags, get_sanitize_patterns

SANITIZE = Path(__file__).with_name("nbval_sanitize.cfg")
NOT_COMPARED = {"image/png", "image/jpeg", "image/svg+xml", "application/vnd.jupyter.widget-view+json"}


def sanitize_patterns(path: Path = SANITIZE) -> list[tuple[re.Pattern, str]]:
    """The (regex, replacement) pairs of an nbval sanitize file, read by nbval's own parser."""
    return [(re.compile(regex), replacement) for regex, replacement in get_sanitize_patterns(path.read_text())]


def ignored(cell: dict) -> bool:
    """nbval's own reading of a cell's ``# NBVAL_IGNORE_OUTPUT`` comment or ``nbval-ignore-output`` tag."""
    markers = [*find_comment_markers("".join(cell["source"])), *find_metadata_tags(cell.get("metadata", {}))]
    return ("check", False) in markers


def comparable(outputs: list, patterns: list[tuple[re.Pattern, str]]) -> dict[str, list[str]]:
    """One cell's outputs (as nbformat reads them) as nbval compares them: a list of sanitized texts per
    stream name or MIME type."""
    found: dict[str, list[str]] = {}
    for output in coalesce_streams(outputs):  # one output per stream name, as nbval joins them
        if output.output_type == "stream":
            found[output.name] = [output.text]
        elif output.output_type == "error":
            found.setdefault("error", []).append(f"{output.ename}: {output.evalue}")
        elif not NOT_COMPARED & output.data.keys():
            for mime, value in output.data.items():
                found.setdefault(mime, []).append(value if isinstance(value, str) else str(value))
    for texts in found.values():
        for i, text in enumerate(texts):
            for pattern, replacement in patterns:
                text = pattern.sub(replacement, text)
            texts[i] = text
    return found


def differences(stored: dict, executed: dict, limit: int = 600) -> list[str]:
    """Where ``executed``'s outputs differ from ``stored``'s (two notebooks as loaded from JSON), cell by cell."""
    patterns = sanitize_patterns()
    stored, executed = (rejoin_lines(nbformat.from_dict(notebook)) for notebook in (stored, executed))  # as read
    pairs = list(zip(stored.cells, executed.cells, strict=True))
    found = []
    for index, (old, new) in enumerate(pairs):
        if old["cell_type"] != "code" or ignored(old):
            continue
        want, got = comparable(old["outputs"], patterns), comparable(new["outputs"], patterns)
        for key in sorted(want.keys() | got.keys()):
            if want.get(key) != got.get(key):
                found.append(f"cell {index}, {key}: stored {str(want.get(key))[:limit]!s}\n"
                             f"    but this run gave {str(got.get(key))[:limit]!s}")
    return found
