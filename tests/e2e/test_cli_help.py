"""Help that helps (issue 15, item 6), through the real command line: ``heron train --help``
names every config section and points to ``heron config`` and the guides (which exist);
``heron config SUBSTRING`` prints only the keys that contain it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from heron.config.reference import GUIDES
from heron.config.root import HeronConfig
from tests.tolerance import HANG_S

ROOT = Path(__file__).resolve().parents[2]


def _heron(*args):
    return subprocess.run([sys.executable, "-m", "heron.cli", *args], capture_output=True, text=True, timeout=HANG_S)


def test_train_help_names_every_section_and_where_to_read_more():
    r = _heron("train", "--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    for f in dataclasses.fields(HeronConfig):
        assert any(line.split()[:1] == [f.name] for line in lines if line.startswith("  ")), f.name
    assert "heron config SUBSTRING" in r.stdout
    for path, _ in GUIDES:
        assert f"  {path}" in r.stdout and (ROOT / path).is_file(), path
    assert "section.key=value" in r.stdout


def test_config_substring_prints_only_matching_keys():
    r = _heron("config", "DATA.ON_")  # case-insensitive
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines()] == ["data.on_bad_row", "data.on_long_prompt"]
    assert "'error'" in r.stdout and "drop leaves it out" in r.stdout  # default and meaning, as in the full list
    full = _heron("config").stdout.splitlines()
    assert len(full) > 100 and [line for line in full if "data.on_" in line.split()[0]] == r.stdout.splitlines()


def test_config_substring_that_matches_nothing_is_one_line():
    r = _heron("config", "max_promt_tokens")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "heron: config error: no config key contains 'max_promt_tokens'; close: data.max_prompt_tokens; "
        "`heron config` lists every key"
    )
