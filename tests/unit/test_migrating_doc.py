"""docs/migrating.md maps verl / slime / TRL settings to heron keys. Every heron key in its
tables' last column must exist in the config schema, and every ``key=value`` there must load
(together with the other values of its cell), so the guide cannot name a key heron lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.config import ConfigError, load_config
from heron.config.base import field_docs
from heron.config.root import HeronConfig
from tests.doc_tables import table_cells

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"
BASE = ["model.path=m", "data.path=d.jsonl"]


def heron_cells(text: str) -> list[tuple[str, list[str]]]:
    """(setting, the code spans of its heron column) for every row of every table whose
    header's last column is ``heron``."""
    return table_cells(text, -1, "heron")


def test_the_parser_reads_a_row_and_skips_other_tables():
    text = "| a | heron |\n|---|---|\n| lr | `train.lr`, `algo.loss=gspo` |\n\n| x | y |\n|---|---|\n| q | `nope` |\n"
    assert heron_cells(text) == [("lr", ["train.lr", "algo.loss=gspo"])]


def test_every_heron_key_in_the_migration_tables_exists():
    keys = {key for key, _, _ in field_docs(HeronConfig)}
    cells = heron_cells(DOC.read_text())
    assert len(cells) >= 60  # the five tables; a broken parse reads none
    unknown = [(setting, span) for setting, spans in cells for span in spans if span.split("=", 1)[0] not in keys]
    assert not unknown, f"docs/migrating.md names heron keys that do not exist: {unknown}"
    assert all(spans for _, spans in cells), [setting for setting, spans in cells if not spans]


@pytest.mark.parametrize("setting,spans", [c for c in heron_cells(DOC.read_text()) if any("=" in s for s in c[1])])
def test_every_heron_value_in_the_migration_tables_loads(setting, spans):
    overrides = [s for s in spans if "=" in s]
    try:
        load_config(None, [*BASE, *overrides])
    except ConfigError as e:
        pytest.fail(f"docs/migrating.md row '{setting}': {overrides} do not load: {e}")
