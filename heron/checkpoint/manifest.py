"""``manifest.json``: the list of a checkpoint's files with sizes and sha256 checksums, written
last. It is what makes a checkpoint verifiable: ``verify`` checks that every listed file exists
with its size (``quick``) and checksum (full), so a truncated, bit-flipped or half-deleted
checkpoint is recognised before anything is loaded from it.

sha256 (hashlib, ~1-2 GB/s, releases the GIL) rather than crc32: a crc32 can be matched by
changing four bytes of a file, a sha256 cannot be matched at all. Neither stops someone who can
also rewrite ``manifest.json``: what makes loading a foreign checkpoint safe is that heron
unpickles nothing from it but DCP's metadata classes (``heron.checkpoint.safe_load``).

Format 1 manifests (heron before sha256) list crc32s; they still verify, with crc32.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from heron.checkpoint.errors import CheckpointError
from heron.checkpoint.layout import write_file_durably

MANIFEST = "manifest.json"
FORMAT_VERSION = 2  # 2: sha256 per file; 1: crc32 per file (still read)
READABLE_FORMATS = (1, 2)
_CHUNK = 16 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def crc32_of(path: Path) -> str:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def write_manifest(folder: Path, rollout_id: int, known: dict[str, str] | None = None) -> dict:
    """Lists every file under ``folder`` (size, sha256) into ``folder/manifest.json``, fsync'd.
    ``known`` maps paths to sha256s computed while they were written; other files are read."""
    known = known or {}
    paths = sorted(
        Path(dirpath) / name for dirpath, _, filenames in os.walk(folder) for name in filenames if name != MANIFEST
    )
    with ThreadPoolExecutor(max(1, min(4, len(paths)))) as pool:  # hashlib releases the GIL
        checksums = list(pool.map(lambda p: known.get(str(p)) or sha256_of(p), paths))
    files = {
        path.relative_to(folder).as_posix(): {"size": path.stat().st_size, "sha256": digest}
        for path, digest in zip(paths, checksums)
    }
    manifest = {"format": FORMAT_VERSION, "rollout_id": rollout_id, "files": dict(sorted(files.items()))}
    write_file_durably(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
    return manifest


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {folder} is incomplete: no {MANIFEST}") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder} is corrupt: {MANIFEST} unreadable ({e})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"checkpoint {folder} is corrupt: {MANIFEST} has no file list")
    if manifest.get("format") not in READABLE_FORMATS:
        raise CheckpointError(
            f"checkpoint {folder} has manifest format {manifest.get('format')!r}; this heron reads {READABLE_FORMATS}"
        )
    return manifest


def _checksum_matches(path: Path, entry: dict) -> bool:
    if "sha256" in entry:
        return sha256_of(path) == entry["sha256"]
    if "crc32" in entry:  # format 1
        return crc32_of(path) == entry["crc32"]
    return False


def verify(folder: Path, *, quick: bool = False) -> dict:
    """Returns the manifest if every listed file is present with its size (and, unless
    ``quick``, its checksum); raises a one-line ``CheckpointError`` naming the first bad file."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    for rel, entry in manifest["files"].items():
        path = folder / rel
        if not path.is_file():
            raise CheckpointError(f"checkpoint {folder} is incomplete: missing file {rel}")
        if path.stat().st_size != entry["size"]:
            raise CheckpointError(
                f"checkpoint {folder} is corrupt: {rel} has {path.stat().st_size} bytes, manifest says {entry['size']}"
            )
        if not quick and not _checksum_matches(path, entry):
            raise CheckpointError(f"checkpoint {folder} is corrupt: checksum mismatch in {rel}")
    return manifest


def total_bytes(manifest: dict) -> int:
    return sum(entry["size"] for entry in manifest["files"].values())
