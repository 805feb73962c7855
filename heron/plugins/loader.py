"""Loads hooks named in the config and checks them against their hook point's signature.

Accepted forms: ``package.module:function``, ``package.module.function`` and
``path/to/file.py:function`` (relative paths are relative to the working directory; the
attribute may be dotted, ``file.py:Class.method``). Every problem -- a file that does not
exist, an import that fails, a missing attribute, a signature that does not fit -- raises
``HookError`` with ONE line: the hook point, what it expects, what was found and where it
came from. The run loads its hooks before any model, so a wrong hook costs seconds.

What "fits" means, checked with ``inspect.signature``: the hook can be called exactly the way
heron calls it -- the documented positional arguments (more optional ones with defaults are
fine, ``*args`` is fine), the documented keyword arguments by name or ``**kwargs``, no other
required parameter -- and ``async def`` only where the hook point allows it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from heron.config.base import ConfigError
from heron.plugins.hooks import DATA_SOURCE_METHODS, HOOK_POINTS, HookPoint

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class HookError(ConfigError):
    """A hook that cannot be loaded or does not fit its hook point (one line)."""


def load_hook(point: str | HookPoint, spec: str) -> Any:
    """Imports ``spec`` and checks it against hook point ``point``; returns the function/class."""
    point = HOOK_POINTS[point] if isinstance(point, str) else point
    obj, where = resolve(spec, point.config_key)
    problem = check_hook(point, obj)
    if problem:
        raise HookError(
            f"{point.config_key}: hook '{spec}' does not fit: {problem}; "
            f"expected {expected_signature(point)}; found {found_signature(obj)} at {where}"
        )
    return obj


def resolve(spec: str, key: str = "hook") -> tuple[Any, str]:
    """(object, "file:line") for a hook path; raises ``HookError`` naming what is missing."""
    module_part, attr = _split(spec, key)
    if module_part.endswith(".py") or "/" in module_part:
        module = _import_file(Path(module_part), spec, key)
    else:
        if ":" not in spec:  # dotted form: the module is the longest importable prefix (pkg.mod.Class.method)
            module_part, attr = _longest_module_prefix(module_part, attr)
        try:
            module = importlib.import_module(module_part)
        except Exception as e:  # noqa: BLE001 -- any import failure is the user's to fix
            raise HookError(f"{key}: importing module '{module_part}' (from '{spec}') failed: {_one_line(e)}") from None
    obj: Any = module
    for name in attr.split("."):
        if name not in dir(obj):
            names = sorted(n for n, v in vars(obj).items() if callable(v) and not n.startswith("_"))
            raise HookError(
                f"{key}: '{module_part}' has no attribute '{attr}' (from '{spec}'); "
                f"it defines: {', '.join(names) or 'no public callables'}"
            )
        obj = getattr(obj, name)
    return obj, _where(obj, module_part)


def check_hook(point: HookPoint, obj: Any) -> str:
    """What keeps ``obj`` from fitting ``point`` ("" when it fits)."""
    if point.kind == "class":
        if not inspect.isclass(obj):
            return f"it is a {type(obj).__name__}, this hook point takes a class"
        for method in ("__init__", *DATA_SOURCE_METHODS):
            impl = inspect.getattr_static(obj, method, None)
            if impl is None or not callable(getattr(obj, method)):
                return f"it has no method {method}()"
            expected = _drop_self(inspect.signature(getattr(point.protocol, method)))
            problem = _check_call(expected, getattr(obj, method), method, drop_self=True)
            if problem:
                return problem
        return ""
    if inspect.isclass(obj):
        return "it is a class, this hook point takes a function (or an instance with __call__)"
    if not callable(obj):
        return f"it is a {type(obj).__name__}, not callable"
    is_async = is_async_callable(obj)
    if is_async and point.asyncness == "sync":
        return "it is async (async def) but this hook point calls it synchronously"
    if not is_async and point.asyncness == "async":
        return "it is a plain def but this hook point awaits it (use async def)"
    return _check_call(_protocol_signature(point), obj, "")


def _check_call(expected: inspect.Signature, obj: Any, what: str, drop_self: bool = False) -> str:
    """What keeps ``obj`` from accepting the call shape of ``expected`` ("" when nothing);
    ``drop_self``: ``obj`` is a function looked up on a class, its first parameter is self."""
    try:
        found = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""  # not introspectable (some builtins): nothing to check
    if drop_self:
        found = _drop_self(found)
    prefix = f"{what}() " if what else ""
    exp_pos = [p.name for p in expected.parameters.values() if p.kind in _POSITIONAL]
    exp_kw = [p.name for p in expected.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    params = list(found.parameters.values())  # class checks: self on both sides (unbound functions)
    positional = [p for p in params if p.kind in _POSITIONAL]
    required = [p for p in positional if p.default is inspect.Parameter.empty]
    has_var_pos = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    n = len(exp_pos)
    if len(required) > n:
        return f"{prefix}requires {len(required)} positional parameters, heron passes {n} ({', '.join(exp_pos)})"
    if len(positional) < n and not has_var_pos:
        return f"{prefix}takes {len(positional)} positional parameters, heron passes {n} ({', '.join(exp_pos)})"
    for p in params:
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty and p.name not in exp_kw:
            return f"{prefix}requires keyword-only parameter '{p.name}' that heron never passes"
    names = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    for name in exp_kw:
        if name not in names and not has_var_kw:
            return f"{prefix}does not accept keyword argument '{name}' (add it or **kwargs)"
    return ""


def _drop_self(sig: inspect.Signature) -> inspect.Signature:
    return sig.replace(parameters=list(sig.parameters.values())[1:])


def _protocol_signature(point: HookPoint) -> inspect.Signature:
    return _drop_self(inspect.signature(point.protocol.__call__))


class _Text:
    """An annotation shown as written (hooks.py's annotations are strings: no quotes)."""

    def __init__(self, text: Any):
        self.text = text

    def __repr__(self) -> str:
        return self.text if isinstance(self.text, str) else inspect.formatannotation(self.text)


def format_signature(sig: inspect.Signature) -> str:
    empty = inspect.Parameter.empty
    params = [p.replace(annotation=_Text(p.annotation)) if p.annotation is not empty else p for p in sig.parameters.values()]
    ret = _Text(sig.return_annotation) if sig.return_annotation is not empty else empty
    return str(sig.replace(parameters=params, return_annotation=ret))


def expected_signature(point: HookPoint) -> str:
    """``name(params) -> return`` as the docs show it, plus whether it may be async."""
    mode = {"sync": "def", "async": "async def", "either": "def or async def"}[point.asyncness]
    if point.kind == "class":
        init = inspect.signature(point.protocol.__init__)
        init = init.replace(parameters=list(init.parameters.values())[1:], return_annotation=inspect.Signature.empty)
        methods = ", ".join(f"{m}()" for m in DATA_SOURCE_METHODS)
        return f"class {point.protocol.__name__}{format_signature(init)} with methods {methods}"
    return f"{mode} {point.name}{format_signature(_protocol_signature(point))}"


def found_signature(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    try:
        sig = format_signature(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = "(...)"
    if inspect.isclass(obj):
        return f"class {name}{sig}"
    return f"{'async def' if is_async_callable(obj) else 'def'} {name}{sig}"


def is_async_callable(obj: Any) -> bool:
    """True for ``async def`` functions and for instances whose ``__call__`` is async."""
    if inspect.iscoroutinefunction(obj):
        return True
    call = getattr(type(obj), "__call__", None)
    return not inspect.isfunction(obj) and not inspect.ismethod(obj) and inspect.iscoroutinefunction(call)


def _split(spec: str, key: str) -> tuple[str, str]:
    spec = spec.strip()
    if ":" in spec:
        module_part, attr = spec.rsplit(":", 1)
    elif "." in spec and not spec.endswith(".py"):
        module_part, attr = spec.rsplit(".", 1)
    else:
        module_part, attr = "", ""
    if not module_part or not attr:
        raise HookError(
            f"{key}: '{spec}' is not a hook path; write package.module:function, package.module.function "
            f"or path/to/file.py:function"
        )
    return module_part, attr


def _longest_module_prefix(module_part: str, attr: str) -> tuple[str, str]:
    parts = module_part.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            return name, ".".join(parts[i:] + [attr])
    return module_part, attr  # nothing importable: the import below reports it


def _import_file(path: Path, spec: str, key: str):
    path = path.expanduser().resolve()
    if not path.is_file():
        raise HookError(f"{key}: file '{path}' (from '{spec}') does not exist")
    name = f"heron_hooks.{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as e:  # noqa: BLE001 -- any failure while loading is the user's to fix
        del sys.modules[name]
        raise HookError(f"{key}: loading '{path}' (from '{spec}') raised {_one_line(e)}") from None
    return module


def _where(obj: Any, module_part: str) -> str:
    try:
        target = obj if inspect.isclass(obj) or inspect.isroutine(obj) else type(obj)
        file = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
        return f"{file}:{line}"
    except (TypeError, OSError):
        return module_part


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if isinstance(e, SyntaxError) and e.lineno:
        text = f"{e.msg} (line {e.lineno})"
    return f"{type(e).__name__}: {text}"
