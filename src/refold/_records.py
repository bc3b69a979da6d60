"""``dataclass`` and ``field`` as in the standard library, at a fraction of the cost to define.

``refold search`` defines some thirty dataclasses before it does any work. The standard library
compiles each generated method with its own ``exec`` (six for a frozen class: about 1 ms a class
on a slow machine) and imports ``inspect`` (13 ms) to write docstrings: together a third of the
start-up of a small search. This module writes ``__init__`` in one ``exec`` (once a class has
made ``COMPILE_AFTER`` instances: its first ones bind their arguments without it) and the other
methods as closures over ``operator.attrgetter``, without importing ``dataclasses``.

Semantics are the standard library's for the subset refold uses: ``frozen``, ``init=False``,
``field(default=..., default_factory=..., repr=False, compare=False)``, ``__post_init__``,
inheritance from classes made the same way, mutable defaults refused, methods the class body
defines itself left alone. ``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass``
work on these classes: their ``__dataclass_fields__`` is built, from the standard library, the
first time something asks for it. ``replace`` and ``fields`` here do the same without it.
``tests/test_records.py`` checks every behaviour against ``dataclasses``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T", bound=type)
R = TypeVar("R")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
class _Factory:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY: Any = _Factory()  # the default of a parameter whose value comes from a default_factory


class FrozenInstanceError(AttributeError):
    """Raised on assigning to or deleting a field of a frozen record (as ``dataclasses``'s)."""


class Field:
    """One field: its name, default or default factory, and whether repr and compare use it."""

    __slots__ = ("compare", "default", "default_factory", "name", "repr", "type")

    def __init__(self, default: Any = MISSING, default_factory: Any = MISSING,
                 repr: bool = True, compare: bool = True) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.type: Any = None
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.compare = compare

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r})"


def field(*, default: Any = MISSING, default_factory: Any = MISSING, repr: bool = True,
          compare: bool = True) -> Any:
    """A field with a default, a default factory, or left out of repr or comparisons."""
    return Field(default, default_factory, repr, compare)


@overload
def dataclass(cls: T, /) -> T: ...


@overload
def dataclass(*, frozen: bool = False, init: bool = True) -> Callable[[T], T]: ...


@dataclass_transform(field_specifiers=(field, Field))
def dataclass(cls: Any = None, /, *, frozen: bool = False, init: bool = True) -> Any:
    """``@dataclass``, ``@dataclass(frozen=True)`` or ``@dataclass(init=False)``."""
    def wrap(klass: T) -> T:
        return _build(klass, frozen=frozen, init=init)
    return wrap if cls is None else wrap(cls)


def fields(obj: Any) -> tuple[Field, ...]:
    """The fields of a record class or instance, in definition order (bases first)."""
    try:
        return obj.__records_fields__
    except AttributeError:
        raise TypeError("must be called with a record type or instance") from None


def replace(obj: R, /, **changes: Any) -> R:
    """A copy of the record ``obj`` with ``changes`` (as ``dataclasses.replace``).

    When the class's ``__init__`` is the generated one and there is no ``__post_init__``, what
    ``__init__`` would do is assign each field: the copy then takes the fields' values directly
    (a search builds hundreds of copies of its hits). Otherwise it goes through ``__init__``."""
    cls = obj.__class__
    names = cls.__dict__.get("__records_plain__")
    if names is not None and names.issuperset(changes):
        state = obj.__dict__
        copied = object.__new__(cls)
        copied.__dict__.update(state if len(state) == len(names)
                               else {n: state[n] for n in names})
        copied.__dict__.update(changes)
        return copied
    for f in fields(obj):
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return cls(**changes)


_MUTABLE = (list, dict, set)


def _collect(cls: type) -> tuple[Field, ...]:
    own = cls.__dict__
    merged: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in base.__dict__.get("__records_fields__", ()):
            merged[f.name] = f
    for name, annotation in own.get("__annotations__", {}).items():
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        if text.startswith(("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.")):
            raise TypeError(f"{cls.__name__}.{name}: ClassVar and InitVar are not supported here")
        value = own.get(name, MISSING)
        spec = value if isinstance(value, Field) else Field(default=value)
        if isinstance(spec.default, _MUTABLE):
            raise ValueError(f"mutable default {type(spec.default)} for field {name} is not "
                             "allowed: use default_factory")
        spec.name, spec.type = name, annotation
        if isinstance(value, Field):
            if spec.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, spec.default)
        merged[name] = spec
    seen_default = False
    for f in merged.values():
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        if seen_default and not has_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
        seen_default = seen_default or has_default
    return tuple(merged.values())


def _init(cls: type, specs: tuple[Field, ...], frozen: bool) -> Callable[..., None]:
    env: dict[str, Any] = {"_FACTORY": _FACTORY, "_set": object.__setattr__}
    params, body = ["self"], []
    for f in specs:
        value = f.name
        if f.default is not MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            value = f"_f_{f.name}() if {f.name} is _FACTORY else {f.name}"
        else:
            params.append(f.name)
        body.append(f" _set(self, {f.name!r}, {value})" if frozen else f" self.{f.name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append(" self.__post_init__()")
    source = f"def __init__({', '.join(params)}):\n" + ("\n".join(body) or " pass")
    exec(source, env)  # the source is built above from the class's own field names
    made: Callable[..., None] = env["__init__"]
    made.__annotations__ = {**{f.name: f.type for f in specs}, "return": None}
    return made


COMPILE_AFTER = 64  # instances a class makes by binding its arguments before it compiles


def _deferred_init(cls: type, specs: tuple[Field, ...], frozen: bool) -> Callable[..., None]:
    """An ``__init__`` that binds its arguments itself for a class's first ``COMPILE_AFTER``
    instances, then compiles the real one and puts it on the class: a command that makes a
    few instances of a class (``refold search``: one query, one plan, twenty rows) never pays
    for the compile (~0.15 ms a class, ~1.2 ms of a first search over nine classes); one that
    makes many pays it once."""
    made = 0

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal made
        made += 1
        if made > COMPILE_AFTER:
            _real_init(cls)(self, *args, **kwargs)
            return
        _bind(cls, self, specs, frozen, args, kwargs)
        if hasattr(cls, "__post_init__"):  # (as the compiled one: the class's, if it has one)
            self.__post_init__()

    __init__._records_specs = (specs, frozen)  # type: ignore[attr-defined]
    return __init__


def _bind(cls: type, instance: Any, specs: tuple[Field, ...], frozen: bool,
          args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """What the compiled ``__init__`` does, without compiling it: each field from its
    positional or keyword argument, else its default or its factory's value; the same
    ``TypeError``, word for word, for a missing, unexpected, repeated or surplus argument."""
    where = f"{cls.__qualname__}.__init__()"
    if len(args) > len(specs):
        least = 1 + sum(f.default is MISSING and f.default_factory is MISSING for f in specs)
        takes = (f"{least}" if least == len(specs) + 1
                 else f"from {least} to {len(specs) + 1}")
        raise TypeError(f"{where} takes {takes} positional argument"
                        f"{'' if takes == '1' else 's'} but {len(args) + 1} were given")
    values = {f.name: value for f, value in zip(specs, args, strict=False)}
    if kwargs:
        names = {f.name for f in specs}
        for name, value in kwargs.items():
            if name not in names:
                raise TypeError(f"{where} got an unexpected keyword argument {name!r}")
            if name in values:
                raise TypeError(f"{where} got multiple values for argument {name!r}")
            values[name] = value
    missing = [repr(f.name) for f in specs if f.name not in values
               and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        listed = (missing[0] if len(missing) == 1 else
                  f"{missing[0]} and {missing[1]}" if len(missing) == 2 else
                  f"{', '.join(missing[:-1])}, and {missing[-1]}")
        raise TypeError(f"{where} missing {len(missing)} required positional argument"
                        f"{'s' if len(missing) > 1 else ''}: {listed}")
    put = object.__setattr__ if frozen else setattr
    for f in specs:
        if f.name in values:
            value = values[f.name]
        elif f.default is not MISSING:
            value = f.default
        else:
            value = f.default_factory()
        put(instance, f.name, value)


def _real_init(cls: type) -> Callable[..., None]:
    """The class's compiled ``__init__``, compiling it now if it is still deferred."""
    current = cls.__dict__["__init__"]
    pending = getattr(current, "_records_specs", None)
    if pending is None:
        return current
    real = _init(cls, *pending)
    real.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = real  # type: ignore[misc]
    return real


class _Signature:
    """``__signature__`` of a record class, so ``inspect.signature`` shows its fields while
    ``__init__`` is still deferred."""

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is not None or "__records_fields__" not in owner.__dict__ \
                or "__init__" not in owner.__dict__:
            return None  # an instance, or a subclass that is not a record: the usual rules
        import inspect

        signature = inspect.signature(_real_init(owner))
        return signature.replace(parameters=list(signature.parameters.values())[1:])


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    if not names:
        return lambda _obj: ()
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda obj: (get(obj),)


def _build(cls: T, *, frozen: bool, init: bool) -> T:
    own = cls.__dict__
    if frozen and ("__setattr__" in own or "__delattr__" in own):
        raise TypeError(f"cannot overwrite __setattr__ or __delattr__ in frozen {cls.__name__}")
    own_init = "__init__" in own  # (own is live: read it before the methods go in)
    # what the class body defined itself; a body defining __eq__ gets __hash__ = None from
    # Python, which (as for dataclasses) does not count as a __hash__ of its own
    body = set(own)
    if own.get("__hash__", MISSING) is None and "__eq__" in own:
        body.discard("__hash__")
    specs = _collect(cls)
    names = frozenset(f.name for f in specs)
    compared = _getter([f.name for f in specs if f.compare])
    shown = tuple(f.name for f in specs if f.repr)
    methods: dict[str, Any] = {}
    if init:
        methods["__init__"] = _deferred_init(cls, specs, frozen)

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    methods["__repr__"], methods["__eq__"] = __repr__, __eq__
    if frozen:
        def __hash__(self: Any) -> int:
            return hash(compared(self))

        def __setattr__(self: Any, name: str, value: Any) -> None:
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            super(cls, self).__setattr__(name, value)  # type: ignore[arg-type]

        def __delattr__(self: Any, name: str) -> None:
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot delete field {name!r}")
            super(cls, self).__delattr__(name)  # type: ignore[arg-type]

        methods["__hash__"] = __hash__
        methods["__setattr__"], methods["__delattr__"] = __setattr__, __delattr__
    elif "__hash__" not in body:
        methods["__hash__"] = None  # mutable and compared by value: unhashable, as dataclasses
    for name, fn in methods.items():
        if name in body and name not in ("__setattr__", "__delattr__"):
            continue  # the class body's own method wins
        if fn is not None:
            fn.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, fn)
    cls.__records_fields__ = specs  # type: ignore[attr-defined]
    cls.__records_frozen__ = frozen  # type: ignore[attr-defined]
    # replace() may copy fields directly when __init__ would do nothing but assign them
    plain = init and not own_init and not hasattr(cls, "__post_init__")
    cls.__records_plain__ = names if plain else None  # type: ignore[attr-defined]
    if init:
        cls.__match_args__ = tuple(f.name for f in specs)  # type: ignore[attr-defined, misc]
    cls.__dataclass_fields__ = _StdlibFields()  # type: ignore[attr-defined]
    if init and not own_init:
        cls.__signature__ = _Signature()  # type: ignore[attr-defined]
    return cls


class _StdlibFields:
    """``__dataclass_fields__`` made on first use, so that ``dataclasses.fields``, ``replace``,
    ``asdict`` and ``is_dataclass`` see a dataclass, without importing ``dataclasses`` before
    something asks."""

    def __get__(self, obj: Any, owner: type) -> dict[str, Any]:
        import dataclasses

        made = _stdlib_fields(owner, dataclasses)
        setattr(owner, "__dataclass_fields__", made)  # noqa: B010 - replaces this descriptor
        return made


def _stdlib_fields(owner: type, dataclasses: Any) -> dict[str, Any]:
    # a stand-in class the standard library reads the same fields from; generates no methods
    namespace: dict[str, Any] = {"__annotations__": {}}
    for f in owner.__records_fields__:  # type: ignore[attr-defined]
        namespace["__annotations__"][f.name] = f.type
        given = {"default": f.default, "default_factory": f.default_factory}
        namespace[f.name] = dataclasses.field(repr=f.repr, compare=f.compare, **{
            key: value for key, value in given.items() if value is not MISSING})
    stand_in = type(owner.__name__, (), {**namespace, "__module__": owner.__module__})
    fixed = dataclasses.dataclass(stand_in, init=False, repr=False, eq=False, match_args=False)
    return fixed.__dataclass_fields__


def is_record(obj: Any) -> bool:
    """Is ``obj`` a record class or instance made by :func:`dataclass`?"""
    return hasattr(obj, "__records_fields__")


def asdict(obj: Any) -> dict[str, Any]:
    """A record as a dict, recursing into records, lists, tuples and dicts, other values copied
    deeply (as ``dataclasses.asdict``)."""
    if not is_record(obj) or isinstance(obj, type):
        raise TypeError("asdict() should be called on record instances")
    return _plain(obj)


def _plain(value: Any) -> Any:
    if is_record(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple keeps its type
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    import copy

    return copy.deepcopy(value)
