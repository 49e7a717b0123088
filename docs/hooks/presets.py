"""MkDocs hook: each papers page's "expected output" table, from the committed
``experiments/presets/results.csv`` (written by ``python experiments/presets/run.py``), so the
numbers a page shows are the ones the committed code printed.

A page asks for the table with a line ``<!-- expected-output: name, name, ... -->``.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

MARKER = re.compile(r"<!-- expected-output: ([a-z0-9_, ]+) -->")


def _rows(root: Path) -> dict[str, dict]:
    with open(root / "experiments" / "presets" / "results.csv") as f:
        return {row["preset"]: row for row in csv.DictReader(f)}


def table(names: list[str], rows: dict[str, dict]) -> str:
    lines = ["| preset | what `python -m fedray experiment=<preset>` ends with (median over replicas; best replica in brackets) | eps spent "
             "| seconds |", "|---|---|---:|---:|"]
    for name in names:
        row = rows[name]             # a preset without a row is a KeyError: the build fails, as it should
        shown = row["metrics"] if row["exit"] == "0" else f"exit {row['exit']}: {row['metrics']}"
        lines.append(f"| `{name}` | {shown} | {row['epsilon_spent'] or '-'} | {float(row['seconds']):.0f} |")
    return "\n".join(lines)


def on_page_markdown(markdown, page, config, files):
    root = Path(config["config_file_path"]).parent
    if not MARKER.search(markdown):
        return markdown
    rows = _rows(root)
    return MARKER.sub(lambda m: table([n.strip() for n in m.group(1).split(",") if n.strip()], rows), markdown)
