"""Raw rows of a dataset file, each with where it came from, for JSONL, Parquet and local HF
``datasets`` folders (``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``).

A reader yields ``(where, row)``; a row that cannot even be decoded (bad JSON) is yielded as
a ``DataError`` so the caller decides whether to stop or skip (``data.on_bad_row``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from heron.data.rows import DataError
from heron.extras import require_extra


def detect_format(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    if path.is_dir():
        return "hf"
    if path.suffix == ".parquet":
        return "parquet"
    if path.suffix in (".jsonl", ".json"):
        return "jsonl"
    raise DataError(f"dataset '{path}': cannot tell its format from the name; set data.format=jsonl|parquet|hf")


def read_rows(path: str | Path, fmt: str = "auto", split: str = "train") -> Iterator[tuple[str, Any]]:
    path = Path(path)
    if not path.exists():
        raise DataError(f"dataset '{path}' does not exist; check data.path / eval.path")
    fmt = detect_format(path, fmt)
    if fmt == "jsonl":
        yield from _jsonl(path)
    elif fmt == "parquet":
        yield from _parquet(path)
    else:
        yield from _hf_folder(path, split)


def _jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as e:
                yield where, DataError(f"{where}: invalid JSON ({e.msg})")


def _parquet(path: Path) -> Iterator[tuple[str, Any]]:
    require_extra("data", f"the Parquet dataset '{path}'")
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 -- a corrupt file is the user's to fix
        raise DataError(f"dataset '{path}' is not a readable Parquet file: {type(e).__name__}: {e}") from None
    for i, row in enumerate(table.to_pylist(), start=1):
        yield f"{path} row {i}", row


def _hf_folder(path: Path, split: str) -> Iterator[tuple[str, Any]]:
    require_extra("data", f"the datasets folder '{path}'")
    import datasets

    try:
        data = datasets.load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001
        raise DataError(f"dataset '{path}' is not a datasets folder (save_to_disk): {type(e).__name__}: {e}") from None
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise DataError(f"dataset '{path}' has splits {sorted(data)}, not '{split}'; set data.split")
        data = data[split]
        path = path / split
    for i, row in enumerate(data, start=1):
        yield f"{path} row {i}", row
