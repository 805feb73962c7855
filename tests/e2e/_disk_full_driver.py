"""Runs inside ``unshare --user --map-root-user --mount`` (see test_disk_full.py): mounts a small
tmpfs on the run folder's parent, so the disk really fills up (ENOSPC), runs ``heron train`` on
it, records what it left, grows the tmpfs and reruns the same command. The mount exists only in
this namespace, so everything is inspected here and reported as one JSON object on stdout.

Usage: _disk_full_driver.py MOUNT_DIR SIZE_BYTES key.sub=value ...
"""

import json
import subprocess
import sys
from pathlib import Path


def _attempt(overrides: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-m", "heron.cli", "train", *overrides], capture_output=True, text=True,
                       timeout=600)
    return {"rc": r.returncode, "stderr": r.stderr}


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def _jsonl_ok(path: Path) -> bool:
    if not path.is_file():
        return True
    data = path.read_bytes()
    try:
        [json.loads(line) for line in data.splitlines()]
    except ValueError:
        return False
    return data == b"" or data.endswith(b"\n")


def _png_ok(path: Path) -> bool:
    """Absent, or a whole PNG (signature first, IEND chunk last): never a partial file."""
    if not path.exists():
        return True
    data = path.read_bytes()
    return data.startswith(b"\x89PNG\r\n\x1a\n") and data[-8:-4] == b"IEND"


def main() -> None:
    mount_dir, size, overrides = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    run_dir = Path(next(o for o in overrides if o.startswith("run.dir=")).split("=", 1)[1])
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_dir)], check=True)
    report = {"first": _attempt(overrides)}
    report["after_first"] = {
        "files": _files(run_dir),
        "metrics_ok": _jsonl_ok(run_dir / "metrics.jsonl"),
        "png_ok": _png_ok(run_dir / "reward_curve.png"),
    }
    subprocess.run(["mount", "-o", f"remount,size={size * 8}", str(mount_dir)], check=True)  # "free space"
    report["second"] = _attempt(overrides)
    report["after_second"] = {"files": _files(run_dir), "metrics": (run_dir / "metrics.jsonl").read_text()}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
