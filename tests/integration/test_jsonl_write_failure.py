"""A metrics record whose write fails part-way (file size limit, full disk) leaves no torn line:
the writer writes each record with one ``write`` of the whole line and cuts a short write back.
A real child process under RLIMIT_FSIZE (writes beyond it fail with EFBIG)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 10_000  # bytes; each record is ~3,000, so the 4th record crosses the limit mid-line

CHILD = """
import errno, json, resource, signal, sys
from heron.tracking.metrics_file import JsonlWriter
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the process at the limit
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
writer = JsonlWriter(sys.argv[1])
for i in range(100):
    try:
        writer.write({"rollout_id": i, "text": "x" * 3000})
    except Exception as e:
        print(json.dumps({"written": i, "error": type(e).__name__, "message": str(e)}))
        break
"""


def test_a_write_cut_short_by_a_file_size_limit_leaves_only_whole_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    result = subprocess.run([sys.executable, "-c", CHILD, str(path), str(LIMIT)], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["written"] == 3 and "File too large" in report["message"], report
    assert "\n" not in report["message"] and str(path) in report["message"], report
    data = path.read_bytes()
    assert data.endswith(b"\n") and [json.loads(line)["rollout_id"] for line in data.splitlines()] == [0, 1, 2]
