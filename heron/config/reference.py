"""The config reference as the command line shows it: ``heron config [SUBSTRING]`` (every key,
its default and meaning, or those whose key contains SUBSTRING) and the section list that
``heron train --help`` ends with. Built from the config dataclasses themselves
(``field_docs``), so it cannot drift from what ``load_config`` accepts. Importable without torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing

from heron.config.base import ConfigError, field_docs

# The user guides, in reading order (docs/ beside README.md in the source tree).
GUIDES = [
    ("README.md", "usage, the keys that matter most"),
    ("docs/data.md", "datasets, bad rows, prompt lengths, system prompt, rewards"),
    ("docs/algorithms.md", "advantages, losses, KL"),
    ("docs/hooks.md", "your own generate, reward, loss, data source"),
    ("docs/engines.md", "embedded or vLLM rollout engines"),
    ("docs/cluster.md", "Ray, data parallelism, placement"),
    ("docs/checkpoints.md", "save, resume, export"),
    ("docs/migrating.md", "verl / slime / TRL settings -> heron keys"),
]


def config_lines(root: type, substring: str = "") -> list[str]:
    """One line per config key (``key  default  meaning``), only keys containing ``substring``
    (case-insensitive) when it is given; a ``ConfigError`` naming close keys when none does."""
    rows = field_docs(root)
    wanted = substring.lower()
    found = [(key, text, default) for key, text, default in rows if wanted in key.lower()]
    if not found:
        close = _close_keys(wanted, [key for key, _, _ in rows])
        hint = f"; close: {', '.join(close)}" if close else ""
        raise ConfigError(f"no config key contains '{substring}'{hint}; `heron config` lists every key")
    return [f"{key:32} {default!r:>14}  {text}" for key, text, default in found]


def _close_keys(wanted: str, keys: list[str], cutoff: float = 0.75) -> list[str]:
    """Up to 3 keys whose full name or last part is a near spelling of ``wanted``."""
    def score(key: str) -> float:
        return max(difflib.SequenceMatcher(None, wanted, k).ratio() for k in (key.lower(), key.rsplit(".", 1)[-1].lower()))

    scored = sorted(((score(k), k) for k in keys), key=lambda sk: -sk[0])
    return [k for s, k in scored[:3] if s >= cutoff]


def sections_help(root: type) -> str:
    """The epilog of ``heron train --help``: each top-level section and what it configures,
    then where every key and the guides are."""
    hints = typing.get_type_hints(root)
    width = max(len(f.name) for f in dataclasses.fields(root))
    lines = ["config sections (set any key with section.key=value, or in the --config YAML):"]
    for f in dataclasses.fields(root):
        kind = "" if dataclasses.is_dataclass(hints[f.name]) else " (a top-level key)"
        lines.append(f"  {f.metadata.get('key', f.name):{width}}  {f.metadata.get('doc', '')}{kind}")
    lines += [
        "",
        "every key with its default and meaning: heron config; only some: heron config SUBSTRING (e.g. heron config data.)",
        "guides (in the source tree):",
        *(f"  {path:20} {what}" for path, what in GUIDES),
    ]
    return "\n".join(lines)
