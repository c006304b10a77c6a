"""Values with a class of their own: pydantic models, dataclasses, named tuples, enums and
user-registered types.

An object is stored as a class reference `module:qualname` plus its field values. Decoding
imports the class only after the data asked for it, only from a package the program has
imported already, and checks that it really is the kind of class the tag says before
building an instance, so a run log cannot make the decoder run a package's code or call
arbitrary callables.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from agentreplay_core._codec_base import CodecFailure


class ObjectParts(NamedTuple):
    """What the walker encodes for one object."""

    tag: str
    cls: str
    fields: dict[str, Any]
    extra: dict[str, Any] | None = None
    fields_set: list[str] | None = None


class Registered(NamedTuple):
    cls: type
    name: str
    to_json: Callable[[Any], Any]
    from_json: Callable[[Any], Any]


#: user-registered types by tag name and by class
REGISTERED_BY_NAME: dict[str, Registered] = {}
REGISTERED_BY_TYPE: dict[type, Registered] = {}


def class_ref(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _pydantic_base() -> type | None:
    # no instance can be a pydantic model unless pydantic is already imported
    module = sys.modules.get("pydantic")
    base = getattr(module, "BaseModel", None)
    return base if isinstance(base, type) else None


def object_parts(v: Any) -> ObjectParts | None:
    """Describe a pydantic model, dataclass instance or named tuple; None for anything else."""
    cls = type(v)
    base = _pydantic_base()
    if base is not None and isinstance(v, base):
        extra = getattr(v, "__pydantic_extra__", None)
        fields_set = getattr(v, "__pydantic_fields_set__", None)
        return ObjectParts(
            "pydantic",
            class_ref(cls),
            dict(v.__dict__),
            dict(extra) if extra else None,
            sorted(fields_set) if fields_set is not None else None,
        )
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        missing = object()
        fields = {}
        for field in dataclasses.fields(v):
            value = getattr(v, field.name, missing)
            if value is not missing:  # an init=False field that was never assigned
                fields[field.name] = value
        return ObjectParts("dataclass", class_ref(cls), fields)
    if isinstance(v, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
        return ObjectParts("namedtuple", class_ref(cls), dict(zip(cls._fields, v, strict=True)))
    return None


def resolve_class(ref: str, kind: str, check: Callable[[type], bool]) -> type:
    """Import the class named `module:qualname` and check it is a `kind`."""
    module_name, _, qualname = ref.partition(":")
    hint = "; decode with restore_objects=False to get plain values instead"
    if "<locals>" in qualname:
        raise CodecFailure(f"{kind} {ref} was defined inside a function and cannot be "
                           f"imported{hint}", ref)
    package = module_name.partition(".")[0]
    if package not in sys.modules:
        # Importing runs a package's top-level code, so a run log (a tampered row, one from
        # elsewhere) must not choose a package to run. A submodule of an imported package is
        # fine: the program runs that package's code already, and models often live in
        # submodules imported lazily.
        raise CodecFailure(
            f"{kind} {ref} is in package {package!r}, which this program has not imported; "
            f"decoding never imports a package a value names: import {package} first{hint}",
            ref)
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise CodecFailure(f"cannot import {kind} {ref} ({exc}){hint}", ref) from exc
    if not isinstance(target, type) or not check(target):
        raise CodecFailure(f"{ref} is not a {kind}; the run log names a different class{hint}",
                           ref)
    return target


def _is_pydantic(cls: type) -> bool:
    base = _pydantic_base()
    return base is not None and issubclass(cls, base)


def _is_namedtuple(cls: type) -> bool:
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def rebuild(tag: str, ref: str, fields: dict[str, Any], extra: dict[str, Any] | None,
            fields_set: list[str] | None) -> Any:
    """An instance of the referenced class holding exactly the recorded field values."""
    if tag == "pydantic":
        cls: Any = resolve_class(ref, "pydantic model", _is_pydantic)
        values = {**fields, **(extra or {})}
        chosen = set(fields_set) if fields_set is not None else None
        return cls.model_construct(_fields_set=chosen, **values)
    if tag == "dataclass":
        cls = resolve_class(ref, "dataclass", dataclasses.is_dataclass)
        # bypass __init__/__post_init__: the recorded state is already the result of them
        obj = cls.__new__(cls)
        for name, value in fields.items():
            object.__setattr__(obj, name, value)
        return obj
    cls = resolve_class(ref, "named tuple class", _is_namedtuple)
    return tuple.__new__(cls, [fields[name] for name in cls._fields])


def rebuild_enum(ref: str, value: Any) -> enum.Enum:
    cls: Any = resolve_class(ref, "enum class", lambda c: issubclass(c, enum.Enum))
    member: enum.Enum = cls(value)
    return member


def registered_for(v: object) -> Registered | None:
    """The registration covering `v`'s class or one of its bases."""
    entry = REGISTERED_BY_TYPE.get(type(v))
    if entry is not None:
        return entry
    for cls, candidate in REGISTERED_BY_TYPE.items():
        if isinstance(v, cls):
            return candidate
    return None
