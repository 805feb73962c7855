"""docs/speed.md's "Making a run fast" guide names heron settings. Every config key it names
must exist in the schema, and every row of its settings table must load as written (the code
spans of its first column together), so the guide cannot point at a key heron lacks or a value
it refuses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from heron.config import ConfigError, load_config
from heron.config.base import field_docs
from heron.config.root import HeronConfig
from tests.doc_tables import table_cells

DOC = Path(__file__).resolve().parents[2] / "docs" / "speed.md"
BASE = ["model.path=m", "data.path=d.jsonl"]
KEYS = {key for key, _, _ in field_docs(HeronConfig)}
SECTIONS = {key.split(".", 1)[0] for key in KEYS}


def guide(text: str) -> str:
    """The text of the "## Making a run fast" section, up to the next heading of its level."""
    match = re.search(r"^## Making a run fast\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, "docs/speed.md has no '## Making a run fast' section"
    return match.group(1)


def names_config_key(span: str) -> bool:
    """Whether a code span names a config key (``section.key`` or ``section.key=value``)."""
    return "." in span.split("=", 1)[0] and span.split(".", 1)[0] in SECTIONS


def config_spans(text: str) -> list[str]:
    """The code spans of ``text`` that name a config key."""
    return [s for s in re.findall(r"`([^`\s]+)`", text) if names_config_key(s)]


def setting_rows(text: str) -> list[list[str]]:
    """The config spans of the first column of every row of the table headed ``| setting |``."""
    return [[s for s in spans if names_config_key(s)] for _, spans in table_cells(text, 0, "setting")]


def test_the_parsers_read_a_row_and_skip_other_spans():
    text = "x `train.lr=1` and `time/train_s` and `bench/x.py`\n\n| setting | m |\n|---|---|\n| `a.b` `train.compile=true` | `train.lr` |\n"
    assert config_spans(text) == ["train.lr=1", "train.compile=true", "train.lr"]
    assert setting_rows(text) == [["train.compile=true"]]


def test_every_key_the_guide_names_exists():
    spans = config_spans(guide(DOC.read_text()))
    assert len(spans) >= 15  # the defaults paragraph and the table; a broken parse finds none
    unknown = [s for s in spans if s.split("=", 1)[0] not in KEYS]
    assert not unknown, f"docs/speed.md's guide names keys that do not exist: {unknown}"


ROWS = setting_rows(guide(DOC.read_text()))


def test_the_settings_table_has_its_rows():
    assert len(ROWS) >= 9 and all(ROWS), ROWS


@pytest.mark.parametrize("overrides", ROWS, ids=[row[0] for row in ROWS])
def test_every_setting_row_loads_as_written(overrides):
    try:
        load_config(None, [*BASE, *overrides])
    except ConfigError as e:
        pytest.fail(f"docs/speed.md's guide row {overrides} does not load: {e}")
