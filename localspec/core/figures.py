"""How a statistic is declared once and shown everywhere from that declaration.

A record (:class:`~localspec.core.events.GenerationStats`, :class:`~localspec.core.events.RoundStats`)
is a dataclass whose figures are declared with :func:`stat` (a stored field) or :func:`derived` (a
property computed from them). The declaration names the figure (its attribute is its key in every
output), places it (declaration order: the record's dict; a position in each named view such as the
server's ``speculation`` object), says whether it adds up over generations and which ``/metrics``
series counts it. Pure: no I/O, no Prometheus here, only the names.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

_declared = itertools.count()  #: the order figures are declared in: the order of their dict


@dataclass(frozen=True)
class Metric:
    """A series of the server's ``GET /metrics`` that adds a figure up over finished generations.

    Attributes:
        name: the Prometheus name (``localspec_...``; a counter is exposed with ``_total``).
        help: its ``# HELP`` text.
        buckets: a histogram of the figure's value per generation, with these upper bounds,
            instead of a counter of its sum; ``()`` for a counter.
    """

    name: str
    help: str
    buckets: tuple[float, ...] = ()


@dataclass(frozen=True)
class Figure:
    """One statistic of a record (:class:`~localspec.core.events.GenerationStats`,
    :class:`~localspec.core.events.RoundStats`) as it was declared (:func:`stat` for a stored one,
    :func:`derived` for one computed from them).

    Attributes:
        name: the attribute, and the key everywhere it is shown (``--json``, the server, the bench).
        order: its place in the record's ``as_dict`` (declaration order).
        summed: the record's ``add`` adds it over generations (a dict per key).
        json: it is in the record's ``as_dict`` (``generate --json``'s stats line, the bench's runs,
            saved conversations).
        views: ``(view, position)`` for each named view it is in (:func:`view`): ``speculation``
            (the server's ``speculation`` object), ``bench_run`` (a bench run's figures),
            ``bench_row`` (a bench table row's, over its repetitions), ``line`` (``generate
            --json``'s round line).
        metric: the server's ``/metrics`` series that adds it up, or None.
        parse: turns the plain value (:func:`plain`) back into the attribute's type (``EndReason``).
        derived: computed from the stored figures (a property), not stored.
    """

    name: str
    order: int
    summed: bool = False
    json: bool = True
    views: tuple[tuple[str, int], ...] = ()
    metric: Metric | None = None
    parse: Callable[[Any], Any] | None = None
    derived: bool = False

    def position(self, view: str) -> int | None:
        """The figure's position in ``view``, None when it is not in it."""
        return dict(self.views).get(view)


def stat(default: Any = dataclasses.MISSING, *, factory: Callable[[], Any] | None = None, summed: bool = False,
         json: bool = True, metric: Metric | None = None, parse: Callable[[Any], Any] | None = None,
         **views: int) -> Any:
    """A stored figure: a dataclass field (``default``, or ``factory`` for a mutable one; neither: a
    required one) declared as a :class:`Figure`; ``views``: its position in each named view."""
    meta = {"figure": dict(order=next(_declared), summed=summed, json=json, views=tuple(views.items()),
                           metric=metric, parse=parse)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class _Derived(property):
    figure: dict


def derived(*, json: bool = True, metric: Metric | None = None, **views: int) -> Callable[[Callable], property]:
    """A figure computed from the stored ones: decorates its getter, a read-only property."""
    declared = dict(order=next(_declared), json=json, views=tuple(views.items()), metric=metric, derived=True)

    def wrap(getter: Callable) -> property:
        prop = _Derived(getter, doc=getter.__doc__)
        prop.figure = declared
        return prop

    return wrap


@functools.cache
def figures(record: type) -> tuple[Figure, ...]:
    """The figures a record type declares (its bases' included), in declaration order."""
    found = {f.name: Figure(f.name, **f.metadata["figure"]) for f in dataclasses.fields(record)
             if "figure" in f.metadata}
    for klass in reversed(record.__mro__):
        found.update({name: Figure(name, **attr.figure) for name, attr in vars(klass).items()
                      if isinstance(attr, _Derived)})
    return tuple(sorted(found.values(), key=lambda f: f.order))


def plain(value: Any) -> Any:
    """A figure's value as JSON has it: an enum as its value, a tuple as a list, a dict copied."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def _in_view(record: type, name: str) -> list[Figure]:
    return sorted((f for f in figures(record) if f.position(name) is not None), key=lambda f: f.position(name))


def view(record: Any, name: str) -> dict:
    """The figures of ``record`` in the named view ``name``, in the view's order, as :func:`plain` values."""
    return {f.name: plain(getattr(record, f.name)) for f in _in_view(type(record), name)}


def view_names(record: type, name: str) -> list[str]:
    """The keys of the named view ``name`` of a record type, in the view's order."""
    return [f.name for f in _in_view(record, name)]
