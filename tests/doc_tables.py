"""Reads the Markdown tables of the docs whose tests check them against the config schema
(tests/unit/test_migrating_doc.py, tests/unit/test_speed_doc.py)."""

from __future__ import annotations

import re


def table_cells(text: str, column: int, header: str) -> list[tuple[str, list[str]]]:
    """(first cell, the code spans of cell ``column``) for every body row of every table whose
    header row has ``header`` in that column (``column`` counts from the end when negative)."""
    cells, in_table = [], False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        columns = [c.strip() for c in line.strip().strip("|").split("|")]
        if columns[column] == header:
            in_table = True
        elif in_table and not set(columns[0]) <= set("-"):
            cells.append((columns[0], re.findall(r"`([^`]+)`", columns[column])))
    return cells
