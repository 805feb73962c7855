"""Generates the hook reference of ``docs/hooks.md`` from ``heron.plugins.hooks`` (the same
signatures the loader checks against). ``python -m heron.plugins.docs`` rewrites the part
between the markers; a test regenerates it and fails when the file differs."""

from __future__ import annotations

import sys
from pathlib import Path

from heron.plugins.hooks import HOOK_POINTS
from heron.plugins.loader import expected_signature

BEGIN = "<!-- BEGIN GENERATED HOOK REFERENCE (python -m heron.plugins.docs) -->"
END = "<!-- END GENERATED HOOK REFERENCE -->"
DOC_PATH = Path(__file__).resolve().parent.parent.parent / "docs" / "hooks.md"


def render_reference() -> str:
    lines = ["| hook point | config key | sync/async |", "|---|---|---|"]
    for p in HOOK_POINTS.values():
        mode = {"sync": "sync", "async": "async", "either": "sync or async"}[p.asyncness]
        lines.append(f"| [`{p.name}`](#{p.name.replace('_', '-')}) | `{p.config_key}` | {mode} |")
    for p in HOOK_POINTS.values():
        lines += [
            "", f"### {p.name}", "", f"Config: `{p.config_key}`", "",
            "```python", expected_signature(p), "```", "",
            f"**When:** {p.when}", "", "Example:", "", "```python", p.example, "```",
        ]
    return "\n".join(lines)


def splice(doc: str, reference: str) -> str:
    """``doc`` with the text between BEGIN and END replaced by ``reference``."""
    if BEGIN not in doc or END not in doc:
        raise ValueError(f"docs/hooks.md lacks the markers {BEGIN!r} ... {END!r}")
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{BEGIN}\n{reference}\n{END}{tail}"


def main() -> int:
    DOC_PATH.write_text(splice(DOC_PATH.read_text(), render_reference()))
    print(f"wrote {DOC_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
