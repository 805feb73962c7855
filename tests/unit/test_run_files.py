"""metrics.jsonl / eval.jsonl after a crash: a torn last line (a write cut short by a crash or a
full disk) is dropped with a warning, on resume and when read; a bad line in the middle is
corruption and a one-line error naming file:line."""

from __future__ import annotations

import json
import logging

import pytest

from heron.checkpoint.resume import truncate_run_files
from heron.errors import UserError
from heron.tracking.metrics_file import read_jsonl

ROWS = [{"rollout_id": i, "reward/mean": i / 10} for i in range(4)]


def _write(path, rows, tail: str = "") -> bytes:
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows) + tail
    path.write_text(data)
    return data.encode()


@pytest.mark.parametrize("tail", ['{"rollout_id": 4, "rew', '{"rollout_id": 4, "reward/mean": 0.4\x00\x00'])
def test_resume_drops_a_torn_last_line_with_a_warning(tmp_path, caplog, tail):
    _write(tmp_path / "metrics.jsonl", ROWS, tail)
    _write(tmp_path / "eval.jsonl", ROWS[:2], tail)
    with caplog.at_level(logging.WARNING):
        truncate_run_files(tmp_path, 2)
    assert read_jsonl(tmp_path / "metrics.jsonl") == ROWS[:3]
    assert (tmp_path / "eval.jsonl").read_text() == "".join(json.dumps(r, sort_keys=True) + "\n" for r in ROWS[:2])
    warnings = [r.getMessage() for r in caplog.records if "torn" in r.getMessage()]
    assert any("metrics.jsonl:5" in w for w in warnings) and any("eval.jsonl:3" in w for w in warnings), warnings


def test_rows_up_to_the_checkpoint_are_kept_byte_for_byte(tmp_path):
    before = _write(tmp_path / "metrics.jsonl", ROWS)
    truncate_run_files(tmp_path, 3)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


def test_read_drops_a_torn_last_line(tmp_path, caplog):
    _write(tmp_path / "metrics.jsonl", ROWS, '{"rollout_id": 4, "rew')
    with caplog.at_level(logging.WARNING):
        assert read_jsonl(tmp_path / "metrics.jsonl") == ROWS
    assert any("metrics.jsonl:5" in r.getMessage() for r in caplog.records)


def test_a_bad_line_in_the_middle_is_a_one_line_error_naming_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    _write(path, ROWS[:2], '{"rollout_id": 2, "rew\n' + json.dumps(ROWS[3]) + "\n")
    before = path.read_bytes()
    for action in (lambda: truncate_run_files(tmp_path, 1), lambda: read_jsonl(path)):
        with pytest.raises(UserError, match=f"^{path}:3: ") as info:
            action()
        assert "\n" not in str(info.value)
    assert path.read_bytes() == before  # nothing rewritten
