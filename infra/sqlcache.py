"""The chat turn's fixed statements, compiled once per process instead of at every turn (issue 12).

Django builds and compiles a queryset at every evaluation; for the few statements every chat turn runs
(the locked session read, the session's messages, the inserts, the reply's compare-and-set) that was
most of the web process's CPU per turn. Here:

* :class:`CachedQuery` is an ordinary ``values_list`` queryset, built and compiled by Django once per
  database backend with marker values for its parameters, then run again with the real values through
  the connection's cursor (the backend's own converters applied to what comes back). The SQL stays the
  ORM's, on SQLite and PostgreSQL alike; only its compilation is reused.
* :func:`insert` and :func:`update_where` write one row with the SQL Django would write, built once per
  model and column list from the model's fields (values prepared by the fields themselves), without a
  queryset, a compiler or the model signals (none of the chat models has a receiver).

Every statement still goes through ``connection.cursor()``, so Django's query log, the test suite's
query counting and the database error wrapping see them as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model, QuerySet
from django.db.models.query import get_related_populators  # type: ignore[attr-defined]  # not in the stubs
from django.db.models.sql.compiler import SQLCompiler
from django.db.models.sql.subqueries import UpdateQuery

M = TypeVar("M", bound=Model)

_MARK_INT = -7_315_000_000
_MARK_TIME = datetime(1901, 2, 3, 4, 5, 6, tzinfo=UTC)


def _marker(kind: type, i: int) -> Any:
    if kind is int:
        return _MARK_INT - i
    if kind is datetime:
        return _MARK_TIME + timedelta(microseconds=i + 1)
    if kind is str:
        return f"\x01marker{i}\x01"
    raise TypeError(f"no marker for parameters of type {kind.__name__}")


def _adapt(connection: BaseDatabaseWrapper, value: Any) -> Any:
    """A parameter value as the ORM passes it to the backend (datetimes are the only ones it changes)."""
    if isinstance(value, datetime):
        return connection.ops.adapt_datetimefield_value(value)
    return value


def _markers(kinds: dict[str, type]) -> dict[str, Any]:
    return {name: _marker(kind, i) for i, (name, kind) in enumerate(kinds.items())}


def _slots(
    connection: BaseDatabaseWrapper, markers: dict[str, Any], params: Sequence[Any]
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Where each parameter's marker value landed among the compiled parameters."""
    slots = []
    for name, value in markers.items():
        adapted = _adapt(connection, value)
        positions = tuple(i for i, p in enumerate(params) if type(p) is type(adapted) and p == adapted)
        if not positions:
            raise ValueError(f"parameter {name!r} does not reach the compiled query")
        slots.append((name, positions))
    return tuple(slots)


def _fill(
    connection: BaseDatabaseWrapper,
    params: tuple[Any, ...],
    slots: tuple[tuple[str, tuple[int, ...]], ...],
    values: dict[str, Any],
) -> list[Any]:
    """The compiled parameters with the real values in the markers' places (adapted as the ORM adapts them)."""
    out = list(params)
    for name, positions in slots:
        value = _adapt(connection, values[name])
        for i in positions:
            out[i] = value
    return out


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[str, tuple[int, ...]], ...]  # parameter name -> its positions in params
    compiler: SQLCompiler
    converters: dict[int, tuple[list[Any], Any]]
    populators: list[Any]  # select_related: how each related instance is read from a row


C = TypeVar("C")


class _PerBackend(Generic[C]):
    """A statement compiled once per database backend (alias and vendor), on first use, under a lock."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[str, str], C] = {}
        self._lock = threading.Lock()

    def _compile(self, connection: BaseDatabaseWrapper) -> C:
        raise NotImplementedError

    def compiled(self, connection: BaseDatabaseWrapper) -> C:
        key = (connection.alias, connection.vendor)
        found = self._compiled.get(key)
        if found is None:
            with self._lock:
                found = self._compiled.get(key) or self._compile(connection)
                self._compiled[key] = found
        return found


class CachedQuery(_PerBackend[_Compiled]):
    """A ``values_list`` queryset compiled once per backend and run again with new parameter values.

    ``build(**params)`` returns the queryset; ``kinds`` names each parameter's type (``int``, ``str`` or
    ``datetime``). The first :meth:`rows` on a backend builds it with a marker value for each parameter,
    compiles it and finds the markers among the compiled parameters; later calls substitute the real
    values (adapted as the ORM adapts them) and execute the same SQL. Compiling happens where the first
    call runs: inside the caller's transaction, which ``select_for_update`` needs."""

    def __init__(self, build: Callable[..., QuerySet[Any]], **kinds: type) -> None:
        super().__init__()
        self.build = build
        self.kinds = kinds

    def _compile(self, connection: BaseDatabaseWrapper) -> _Compiled:
        markers = _markers(self.kinds)
        queryset = self.build(**markers)
        compiler = queryset.query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        slots = _slots(connection, markers, params)
        expressions = [s[0] for s in compiler.select]
        converters = compiler.get_converters(expressions)
        populators = (
            get_related_populators(compiler.klass_info, compiler.select, connection.alias)
            if compiler.klass_info
            else []
        )
        return _Compiled(sql, tuple(params), slots, compiler, converters, populators)

    def sql(self, using: str = DEFAULT_DB_ALIAS) -> str:
        """The SQL as compiled for ``using`` (for tests and docs)."""
        return self.compiled(connections[using]).sql

    def rows(self, using: str = DEFAULT_DB_ALIAS, **values: Any) -> list[Sequence[Any]]:
        """The rows for these parameter values, converted as the queryset would convert them."""
        return self._rows(connections[using], **values)[1]

    def objects(self, using: str = DEFAULT_DB_ALIAS, **values: Any) -> list[Any]:
        """For a queryset of model instances: the instances, loaded as Django's ``ModelIterable`` loads
        them (``select_related`` instances attached, annotations set as attributes)."""
        compiled, rows = self._rows(connections[using], **values)
        compiler = compiled.compiler
        klass_info = compiler.klass_info
        assert klass_info is not None, "objects() needs a queryset of model instances"
        model = klass_info["model"]
        fields = klass_info["select_fields"]
        start, end = fields[0], fields[-1] + 1
        names = [s[0].target.attname for s in compiler.select[start:end]]
        out = []
        for row in rows:
            obj = model.from_db(using, names, row[start:end])
            for populator in compiled.populators:
                populator.populate(row, obj)
            for attr, position in compiler.annotation_col_map.items():
                setattr(obj, attr, row[position])
            out.append(obj)
        return out

    def _rows(self, connection: BaseDatabaseWrapper, **values: Any) -> tuple[_Compiled, list[Sequence[Any]]]:
        compiled = self.compiled(connection)
        params = _fill(connection, compiled.params, compiled.slots, values)
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows: list[Sequence[Any]] = cursor.fetchall()
        if compiled.converters:
            rows = list(compiled.compiler.apply_converters(rows, compiled.converters))
        return compiled, rows


# ------------------------------------------------------------------------------------------ writes

_SQL: dict[tuple[Any, ...], str] = {}


def _insert_fields(model: type[Model]) -> list[Field[Any, Any]]:
    meta = model._meta
    return [f for f in meta.local_concrete_fields if f is not meta.auto_field and not getattr(f, "generated", False)]


# The value types each field class stores unchanged: for these (and ``None``) ``get_db_prep_save`` returns the
# value itself on every backend (chat/tests/test_sqlcache.py checks it field by field on SQLite and PostgreSQL).
# A datetime goes to the backend's ``adapt_datetimefield_value``, as ``DateTimeField`` sends an aware one.
_AS_IS: tuple[tuple[type[Field[Any, Any]], type], ...] = (
    (models.BooleanField, bool),
    (models.CharField, str),
    (models.TextField, str),
    (models.FloatField, float),
    (models.IntegerField, int),  # with the positive, small and big ones (subclasses)
)


_SAMPLES: dict[type, Any] = {bool: True, str: "x", float: 1.5, int: 7}


def _preparer(field: Field[Any, Any], connection: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """``field.get_db_prep_save(value, connection)``, with the common cases answered without the field's
    chain of calls (a chat turn prepares some sixty values): ``None`` for a nullable column, a value of the
    type the column stores as is on this backend (checked once on a sample value), an aware datetime (the
    backend's adapter, as ``DateTimeField`` calls it).
    Anything else (a JSON value, a naive datetime, an expression, another type) takes the field's own way."""
    prep = field.get_db_prep_save
    nullable = bool(field.null)

    def slow(value: Any) -> Any:
        return prep(value, connection)

    kind: type | None = None
    if isinstance(field, models.ForeignKey):
        kind = int if isinstance(field.target_field, models.AutoField | models.IntegerField) else None
    elif isinstance(field, models.DateTimeField):
        adapt = connection.ops.adapt_datetimefield_value

        def moment(value: Any) -> Any:
            if type(value) is datetime and value.tzinfo is not None:
                return adapt(value)
            return None if value is None and nullable else slow(value)

        return moment
    elif not isinstance(field, models.JSONField | models.DateField | models.DecimalField | models.TimeField):
        kind = next((t for cls, t in _AS_IS if isinstance(field, cls)), None)
    if kind is None:
        return slow
    sample = _SAMPLES[kind]
    prepared = slow(sample)
    if type(prepared) is not kind or prepared != sample:  # this backend adapts them (psycopg's Int4 on PostgreSQL)
        return slow

    def as_is(value: Any) -> Any:
        return value if type(value) is kind or (value is None and nullable) else slow(value)

    return as_is


_PREPARERS: dict[tuple[Any, ...], list[tuple[Field[Any, Any], Callable[[Any], Any], bool]]] = {}


def _preparers(
    model: type[Model], connection: BaseDatabaseWrapper
) -> list[tuple[Field[Any, Any], Callable[[Any], Any], bool]]:
    """The insert's columns of ``model``: each field, its preparer, and whether its ``pre_save`` is needed
    (a date field's ``auto_now``; any other field's ``pre_save`` reads the attribute)."""
    key = (model, connection.alias, connection.vendor)
    found = _PREPARERS.get(key)
    if found is None:
        found = [
            (f, _preparer(f, connection), type(f).pre_save is not Field.pre_save and not _plain_date(f))
            for f in _insert_fields(model)
        ]
        _PREPARERS[key] = found
    return found


def _plain_date(field: Field[Any, Any]) -> bool:
    """A date field without ``auto_now``/``auto_now_add``: its ``pre_save`` only reads the attribute."""
    return (
        isinstance(field, models.DateField)
        and type(field).pre_save in (models.DateField.pre_save, models.DateTimeField.pre_save)
        and not field.auto_now
        and not field.auto_now_add
    )


def insert(obj: M, using: str = DEFAULT_DB_ALIAS) -> M:
    """Insert a new instance (its primary key is set from the database) in one statement: what
    ``obj.save(force_insert=True)`` writes, with each value prepared by its field (``pre_save`` included:
    ``auto_now_add`` and the like), without compiling a query or sending model signals."""
    connection = connections[using]
    model = type(obj)
    meta = model._meta
    columns = _preparers(model, connection)
    returning = bool(connection.features.can_return_columns_from_insert)
    key = ("insert", model, connection.alias, connection.vendor)
    sql = _SQL.get(key)
    if sql is None:
        qn = connection.ops.quote_name
        sql = "INSERT INTO {} ({}) VALUES ({})".format(
            qn(meta.db_table), ", ".join(qn(f.column) for f, _, _ in columns), ", ".join(["%s"] * len(columns))
        )
        if returning:
            sql += " " + connection.ops.return_insert_columns([meta.pk])[0]
        _SQL[key] = sql
    values = obj.__dict__
    params = [prep(f.pre_save(obj, True) if hook else values[f.attname]) for f, prep, hook in columns]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchone() if returning else None
        pk = returned[0] if returned else connection.ops.last_insert_id(cursor, meta.db_table, meta.pk.column)
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = using
    return obj


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    if not isinstance(field, Field) or not field.concrete:
        raise ValueError(f"{model.__name__}.{name} is not a column")
    return field


def update_where(
    model: type[Model], pk: Any, match: dict[str, Any], values: dict[str, Any], using: str = DEFAULT_DB_ALIAS
) -> int:
    """``model.objects.filter(pk=pk, **match).update(**values)`` (field names; ``match`` compares with
    ``=``, so no ``None`` there), in one statement without a queryset; the number of rows changed."""
    connection = connections[using]
    meta = model._meta
    key = ("update", model, tuple(match), tuple(values), connection.alias, connection.vendor)
    found = _UPDATES.get(key)
    if found is None:
        qn = connection.ops.quote_name
        sets = ", ".join(f"{qn(_field(model, name).column)} = %s" for name in values)
        where = " AND ".join(f"{qn(_field(model, name).column)} = %s" for name in (meta.pk.name, *match))
        sql = f"UPDATE {qn(meta.db_table)} SET {sets} WHERE {where}"
        preps = [_preparer(_field(model, name), connection) for name in values]
        found = _UPDATES[key] = (sql, preps, [_field(model, name) for name in match])
    if any(v is None for v in match.values()):
        raise ValueError("update_where matches with '=': None never matches")
    sql, preps, matched = found
    params = [prep(v) for prep, v in zip(preps, values.values(), strict=True)]
    params.append(meta.pk.get_db_prep_value(pk, connection))
    params += [f.get_db_prep_value(v, connection) for f, v in zip(matched, match.values(), strict=True)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


_UPDATES: dict[tuple[Any, ...], tuple[str, list[Callable[[Any], Any]], list[Field[Any, Any]]]] = {}


class Row:
    """One row, by primary key and the values it must still have: ``Row(Message, pk, status="pending",
    attempts=2).update(...)`` is ``Message.objects.filter(pk=pk, status="pending", attempts=2).update(...)``
    (:func:`update_where`) without building a queryset. What a job holds (``chat.leases.Held``)."""

    def __init__(self, model: type[Model], pk: Any, **match: Any) -> None:
        self.model, self.pk, self.match = model, pk, match

    def update(self, **values: Any) -> int:
        return update_where(self.model, self.pk, self.match, values)


class CachedUpdate(_PerBackend[tuple[Any, ...]]):
    """An ``UPDATE`` of a queryset's rows that returns them (``UPDATE ... RETURNING``), compiled once per backend.

    ``build(**params)`` returns ``(queryset, values)``: the rows to change and what to set (values or
    expressions, as ``QuerySet.update`` takes them); ``kinds`` names each parameter's type, as for
    :class:`CachedQuery`. :meth:`update` runs it with the real values and returns the changed rows as model
    instances (every concrete field, converted as a query would convert it). One statement where a read and
    a compare-and-set were two: what a job's claim is (runtime/jobs.py). Needs a backend that can return
    columns (PostgreSQL; SQLite 3.35 and later): :meth:`supported`."""

    def __init__(self, build: Callable[..., tuple[QuerySet[Any], dict[str, Any]]], **kinds: type) -> None:
        super().__init__()
        self.build = build
        self.kinds = kinds

    @staticmethod
    def supported(using: str = DEFAULT_DB_ALIAS) -> bool:
        return bool(connections[using].features.can_return_columns_from_insert)

    def _compile(self, connection: BaseDatabaseWrapper) -> tuple[Any, ...]:
        markers = _markers(self.kinds)
        queryset, values = self.build(**markers)
        query = cast(UpdateQuery, queryset.query.chain(UpdateQuery))
        query.add_update_values(values)
        sql, params = query.get_compiler(connection=connection).as_sql()
        model = queryset.model
        fields = list(model._meta.concrete_fields)
        returning, extra = connection.ops.return_insert_columns(fields)
        table = model._meta.db_table
        converters = []
        for field in fields:
            col = field.get_col(table)
            found = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
            converters.append((found, col))
        slots = _slots(connection, markers, params)
        names = [f.attname for f in fields]
        return (f"{sql} {returning}", tuple(params) + tuple(extra), slots, model, names, converters)

    def sql(self, using: str = DEFAULT_DB_ALIAS) -> str:
        """The SQL as compiled for ``using`` (for tests and docs)."""
        return str(self.compiled(connections[using])[0])

    def update(self, using: str = DEFAULT_DB_ALIAS, **values: Any) -> list[Any]:
        """Run the update with these parameter values; the rows it changed, as model instances."""
        connection = connections[using]
        sql, params, slots, model, names, converters = self.compiled(connection)
        with connection.cursor() as cursor:
            cursor.execute(sql, _fill(connection, params, slots, values))
            rows = cursor.fetchall()
        out = []
        for row in rows:
            converted = list(row)
            for i, (found, col) in enumerate(converters):
                for convert in found:
                    converted[i] = convert(converted[i], col, connection)
            out.append(model.from_db(using, names, converted))
        return out
