"""Typed config machinery: dataclasses built from plain dicts with strict checking.

Each component owns a frozen dataclass whose fields carry a one-line doc (``doc(...)``).
``build(cls, data)`` turns nested dicts (YAML + ``key.sub=value`` overrides) into those
dataclasses and rejects unknown keys, wrong types and impossible combinations with a
one-line ``ConfigError`` before anything runs. Importable without torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Literal, Mapping, TypeVar, get_args, get_origin

import yaml

from heron.errors import UserError

T = TypeVar("T")


class ConfigError(UserError):
    """A user mistake in the configuration; the message is one line that names the fix."""


def doc(
    text: str, default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, key: str | None = None
) -> Any:
    """A dataclass field with a one-line description (shown by ``heron config --help``).
    ``key`` is the YAML key when it differs from the Python name (``async`` -> ``async_``)."""
    metadata = {"doc": text, **({"key": key} if key else {})}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _key(f: dataclasses.Field) -> str:
    """The YAML key of a field: its ``doc(key=...)`` alias, else its Python name."""
    return f.metadata.get("key", f.name)


def check(condition: bool, message: str) -> None:
    """Raises ``ConfigError(message)`` unless ``condition``: for ``__post_init__`` validators."""
    if not condition:
        raise ConfigError(message)


def build(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Builds dataclass ``cls`` from ``data``, checking every key and value type."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    fields = {_key(f): f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1)
            hint = f"; did you mean '{_join(path, close[0])}'?" if close else f"; valid keys: {', '.join(fields)}"
            raise ConfigError(f"unknown config key '{_join(path, key)}'{hint}")
    kwargs = {}
    for yaml_key, f in fields.items():
        name, key = f.name, _join(path, yaml_key)
        if yaml_key in data:
            kwargs[name] = _coerce(data[yaml_key], hints[name], key)
        elif dataclasses.is_dataclass(hints[name]):
            kwargs[name] = build(hints[name], {}, key)  # absent section: defaults, still validated
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing required config key '{key}'")
    try:
        return cls(**kwargs)
    except ConfigError as e:
        prefix = f"{path}: " if path and not str(e).startswith(path) else ""
        raise ConfigError(f"{prefix}{e}") from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _coerce(value: Any, hint: Any, key: str) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if dataclasses.is_dataclass(hint):
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key '{key}' must be a mapping of sub-keys, got {value!r}")
        return build(hint, value, key)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"config key '{key}' has invalid value {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"config key '{key}' must be one of {list(args)}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}' must be a list, got {value!r}")
        item = args[0] if args else Any
        items = [_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key '{key}' must be a mapping, got {value!r}")
        return dict(value)
    return _coerce_scalar(value, hint, key)


def _coerce_scalar(value: Any, hint: Any, key: str) -> Any:
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"config key '{key}' must be an integer, got {value!r}")
    if hint is float:
        return _coerce_float(value, key)
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config key '{key}' must be a string, got {value!r}")
    raise TypeError(f"unsupported config type {hint!r} for '{key}'")  # programmer error


def _coerce_float(value: Any, key: str) -> float:
    """A finite float: inf and nan are never a meaningful setting (``train.lr=inf`` trains
    NaN weights, ``rollout.temperature=inf`` samples uniformly) and are refused here, for
    every float key at once."""
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):  # YAML 1.1 reads "5e-5" (no dot) as a string
        try:
            number = float(value)
        except ValueError:
            pass
    if number is None:
        raise ConfigError(f"config key '{key}' must be a number, got {value!r}")
    if not math.isfinite(number):
        raise ConfigError(f"config key '{key}' must be a finite number, got {value!r}")
    return number


def to_dict(obj: Any) -> Any:
    """The plain-data form of a config (for YAML dumps, digests and checkpoints)."""
    if dataclasses.is_dataclass(obj):
        return {_key(f): to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Applies ``a.b.c=value`` overrides to nested ``data``; values are parsed as YAML."""
    data = _deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key.sub=value")
        dotted, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = dotted.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override '{item}': '{part}' is not a section")
            node = child
        node[parts[-1]] = value
    return data


def load_yaml(path: str) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file '{path}' does not exist") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file '{path}' is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping at the top level")
    return data


def field_docs(cls: type, prefix: str = "") -> list[tuple[str, str, Any]]:
    """(dotted key, doc, default) for every leaf field: the reference table in the docs."""
    rows = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = _join(prefix, _key(f))
        if dataclasses.is_dataclass(hints[f.name]):
            rows.extend(field_docs(hints[f.name], key))
        else:
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)"
            )
            rows.append((key, f.metadata.get("doc", ""), default))
    return rows


def _deepcopy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deepcopy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deepcopy(v) for v in data]
    return data
