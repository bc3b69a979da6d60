"""refold._records.dataclass behaves as dataclasses.dataclass for what refold uses of it.

Each case defines the same class twice, once with the standard library and once with refold's
decorator, and compares what users of the class see: construction, defaults and factories,
repr, equality, hashing, frozenness, __post_init__, inheritance, match, and the standard
library's own fields/replace/asdict/is_dataclass on refold's classes.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys

import pytest

from refold import _records as records


@records.dataclass(frozen=True)
class Pickled:
    n: int
    items: list[str] = records.field(default_factory=list)


def _pair(frozen: bool) -> tuple[type, type]:
    made = []
    for deco, fld in ((dataclasses.dataclass, dataclasses.field),
                      (records.dataclass, records.field)):
        @deco(frozen=frozen)
        class Point:
            x: int
            label: str = "p"
            tags: list[str] = fld(default_factory=list)
            secret: str = fld(default="s", repr=False)
            cache: dict[str, int] = fld(default_factory=dict, compare=False)

            def norm(self) -> int:
                return abs(self.x)
        made.append(Point)
    return made[0], made[1]


@pytest.mark.parametrize("frozen", [True, False])
def test_construction_repr_and_equality_match_the_standard_library(frozen: bool) -> None:
    std, rec = _pair(frozen)
    for args, kwargs in (((1,), {}), ((2, "q"), {"tags": ["a"]}), ((), {"x": 3, "secret": "t"})):
        a, b = std(*args, **kwargs), rec(*args, **kwargs)
        assert repr(a).replace("test_records._pair.<locals>.", "") \
            == repr(b).replace("test_records._pair.<locals>.", "")
        assert [getattr(a, n) for n in ("x", "label", "tags", "secret", "cache")] \
            == [getattr(b, n) for n in ("x", "label", "tags", "secret", "cache")]
        assert b == rec(*args, **kwargs)
        assert b.norm() == abs(b.x)
    assert rec(1) != rec(2)
    assert rec(1, cache={"a": 1}) == rec(1)  # compare=False
    assert rec(1).tags is not rec(1).tags  # a fresh list from the factory each time
    assert rec(1) != std(1)  # a different class: NotImplemented both ways, then identity
    with pytest.raises(TypeError):
        rec()  # x is required
    with pytest.raises(TypeError):
        rec(1, nope=2)


@pytest.mark.parametrize("frozen", [True, False])
def test_signatures_match_the_standard_library(frozen: bool) -> None:
    import inspect

    std, rec = _pair(frozen)
    assert str(inspect.signature(rec)) == str(inspect.signature(std))  # before any instance
    rec(1)
    assert str(inspect.signature(rec)) == str(inspect.signature(std))


def test_frozen_records_hash_and_refuse_assignment_as_the_standard_library() -> None:
    std, rec = _pair(True)
    # compare=False: not hashed; a list field makes it unhashable, as in dataclasses
    assert hash(rec(1, "a", tags=())) == hash(rec(1, "a", tags=(), cache={"z": 1}))
    assert hash(rec(1, "a", tags=())) == hash(std(1, "a", tags=()))  # both hash the field tuple
    with pytest.raises(TypeError, match="unhashable"):
        hash(rec(1))
    point = rec(1)
    for action in (lambda: setattr(point, "x", 2), lambda: delattr(point, "x"),
                   lambda: setattr(point, "other", 2)):
        with pytest.raises(records.FrozenInstanceError):
            action()
        with pytest.raises(AttributeError):  # what callers of dataclasses catch
            action()
    assert point.x == 1


def test_mutable_records_are_unhashable_and_assignable() -> None:
    _std, rec = _pair(False)
    point = rec(1)
    point.x = 5
    assert point.x == 5
    with pytest.raises(TypeError, match="unhashable"):
        hash(point)


def test_the_standard_library_reads_refold_records() -> None:
    std, rec = _pair(True)
    point = rec(1, tags=["t"])
    assert dataclasses.is_dataclass(point) and dataclasses.is_dataclass(rec)
    assert [f.name for f in dataclasses.fields(point)] == [f.name for f in dataclasses.fields(std)]
    assert [f.repr for f in dataclasses.fields(rec)] == [f.repr for f in dataclasses.fields(std)]
    assert dataclasses.asdict(point) == dataclasses.asdict(std(1, tags=["t"]))
    moved = dataclasses.replace(point, x=9)
    assert moved == rec(9, tags=["t"]) and type(moved) is rec
    assert records.replace(point, label="z") == rec(1, "z", tags=["t"])
    assert records.asdict(point) == dataclasses.asdict(std(1, tags=["t"]))
    assert records.asdict(point)["tags"] is not point.tags  # copied, as dataclasses.asdict


def test_replace_copies_fields_only_and_runs_what_init_would() -> None:
    from functools import cached_property

    seen: list[int] = []

    @records.dataclass(frozen=True)
    class Cached:
        n: int

        @cached_property
        def double(self) -> int:
            return self.n * 2

    @records.dataclass(frozen=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            seen.append(self.n)

    first = Cached(2)
    assert first.double == 4  # cached in the instance's __dict__
    moved = records.replace(first, n=5)
    assert (moved.n, moved.double) == (5, 10)  # the cache is not copied
    assert records.replace(first) == first and records.replace(first) is not first
    with pytest.raises(TypeError):
        records.replace(first, nope=1)
    with pytest.raises(records.FrozenInstanceError):
        moved.n = 1  # type: ignore[misc]
    records.replace(Checked(1), n=3)
    assert seen == [1, 3]  # __post_init__ ran for the copy, as dataclasses.replace does


def test_nested_records_and_containers_become_plain_data() -> None:
    @records.dataclass(frozen=True)
    class Inner:
        n: int

    @records.dataclass(frozen=True)
    class Outer:
        inner: Inner
        many: tuple[Inner, ...] = ()
        by_name: dict[str, Inner] = records.field(default_factory=dict)

    value = Outer(Inner(1), (Inner(2),), {"k": Inner(3)})
    assert records.asdict(value) == {"inner": {"n": 1}, "many": ({"n": 2},),
                                     "by_name": {"k": {"n": 3}}}
    assert records.asdict(value) == dataclasses.asdict(value)
    with pytest.raises(TypeError):
        records.asdict(Outer)


def test_inheritance_post_init_and_own_methods() -> None:
    seen: list[int] = []

    @records.dataclass(frozen=True)
    class Base:
        a: int
        b: int = 2

    @records.dataclass(frozen=True)
    class Child(Base):
        c: str = "c"

        def __post_init__(self) -> None:
            seen.append(self.a)

    @records.dataclass
    class Custom:
        v: int

        def __repr__(self) -> str:
            return "custom"

        def __eq__(self, other: object) -> bool:
            return True

    child = Child(1, c="z")
    assert (child.a, child.b, child.c) == (1, 2, "z") and seen == [1]
    assert [f.name for f in records.fields(Child)] == ["a", "b", "c"]
    assert Child.__match_args__ == ("a", "b", "c")
    match child:
        case Child(a, b, c):
            assert (a, b, c) == (1, 2, "z")
    assert child != Base(1, 2)  # different classes never compare equal
    assert repr(Custom(1)) == "custom" and Custom(1) == Custom(2)
    assert copy.deepcopy(child) == child
    assert pickle.loads(pickle.dumps(Pickled(4, ["x"]))) == Pickled(4, ["x"])


def test_hash_with_an_own_eq_follows_the_standard_library() -> None:
    made = []
    for deco in (dataclasses.dataclass, records.dataclass):
        @deco(frozen=True)
        class Keyed:
            key: str
            note: str = ""

            def __eq__(self, other: object) -> bool:
                return type(other) is type(self) and other.key == self.key  # type: ignore[attr-defined]

        @deco(frozen=True)
        class Hashed:
            key: str

            def __hash__(self) -> int:
                return 7
        made.append((Keyed, Hashed))
    for keyed, hashed in made:
        assert hash(keyed("a", "x")) == hash(keyed("a", "x"))  # generated: the fields' tuple
        assert keyed("a", "x") == keyed("a", "y")  # the class's own __eq__
        assert hash(hashed("z")) == 7  # the class's own __hash__
    assert hash(made[0][0]("a", "x")) == hash(made[1][0]("a", "x"))


def test_init_false_keeps_the_class_init_and_the_fields() -> None:
    @records.dataclass(init=False)
    class Settings:
        a: int = 1
        items: list[int] = records.field(default_factory=list)

        def __init__(self, **values: int) -> None:
            for f in records.fields(self):
                setattr(self, f.name, values.get(f.name, f.default if f.default is not
                                                 records.MISSING else f.default_factory()))

    made = Settings(a=3)
    assert (made.a, made.items) == (3, [])
    assert made == Settings(a=3) and made != Settings()


def test_definitions_the_standard_library_refuses_are_refused() -> None:
    with pytest.raises(ValueError, match="mutable default"):
        @records.dataclass
        class Bad:
            items: list[int] = []  # noqa: RUF012 - the mistake under test

    with pytest.raises(TypeError, match="non-default argument"):
        @records.dataclass
        class Order:
            a: int = 1
            b: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="__setattr__"):
        @records.dataclass(frozen=True)
        class Own:
            a: int

            def __setattr__(self, name: str, value: object) -> None:
                pass

    with pytest.raises(ValueError, match="both"):
        records.field(default=1, default_factory=int)


def test_refold_search_defines_its_classes_without_the_dataclasses_module() -> None:
    code = ("import sys; import refold.store.sqlite, refold.config, refold.cli.ledger;"
            "print('dataclasses' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


@pytest.mark.parametrize("frozen", [True, False])
def test_the_first_instances_bind_as_the_compiled_init_does(
        frozen: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A class's first instances are made without compiling its ``__init__``
    (``COMPILE_AFTER``): the same fields, defaults, factories, ``__post_init__`` and the same
    ``TypeError`` messages as the compiled one, which takes over after them."""
    cases = [((1,), {}), ((2, "q"), {"tags": ["a"]}), ((), {"x": 3, "secret": "t"}), ((), {}),
             ((1,), {"nope": 2}), ((1,), {"x": 2}), ((1, "a", [], "s", {}, 6), {}),
             ((), {"label": "l"})]

    def made(compile_after: int) -> list[object]:
        monkeypatch.setattr(records, "COMPILE_AFTER", compile_after)
        _, rec = _pair(frozen)

        @records.dataclass(frozen=frozen)
        class Three:
            a: int
            b: int
            c: int

            def __post_init__(self) -> None:
                object.__setattr__(self, "total", self.a + self.b + self.c)

        out: list[object] = []
        for kind, args, kwargs in [*((rec, a, k) for a, k in cases),
                                   (Three, (1, 2, 3), {}), (Three, (), {}), (Three, (1,), {}),
                                   (Three, (1, 2, 3, 4), {})]:
            try:
                one = kind(*args, **kwargs)
                out.append((repr(one), vars(one)))
            except TypeError as exc:
                out.append(str(exc))
        first = rec(1)
        out.append(first.tags is not rec(1).tags)
        return out

    bound, compiled = made(10**9), made(0)
    assert bound == compiled
    assert any("missing 3 required positional arguments: 'a', 'b', and 'c'" in str(o)
               for o in bound)
    monkeypatch.setattr(records, "COMPILE_AFTER", 2)
    _, rec = _pair(frozen)
    for n in range(4):  # compiled after two instances, the same records either side
        assert rec(n, "x").x == n
    assert not hasattr(vars(rec)["__init__"], "_records_specs")
