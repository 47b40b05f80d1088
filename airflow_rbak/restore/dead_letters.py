"""Dead-letter replay: where a dead-lettered message came from, read from its ``x-death`` header.

When RabbitMQ dead-letters a message it adds an ``x-death`` header: an array of
tables, the most recent death first, each naming the ``queue`` it died in, the
``exchange`` it had been published to and its ``routing-keys``. A restore with
``replay_dead_letters`` publishes each selected record of such a queue (a
dead-letter queue's backup) to that exchange with that routing key, so it goes
back where it died, instead of into the dead-letter queue.

The header was written by the broker but stored in a location anyone with write
access could change, and a message's publisher may set it too: it is untrusted
input. So it is read strictly and bounded: an array of at most
:data:`MAX_DEATHS` tables, names of at most 255 bytes of UTF-8 (AMQP's short
string), and exactly one routing key. ``routing-keys`` holds the ``CC`` keys too:
more than one means the message was also routed by ``CC``, which a restore never
publishes (``wire.ROUTING_HEADERS``), so replaying it to one key would not put it
back where it was; such a record has no usable route. A queue with any selected
record without one is refused as a whole, naming the first and why; the other
queues go on. The ``x-death`` header itself is republished as it was stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_rbak.codec.headers import ARRAY, BYTES, LONG_STRING, SHORT_STRING, TABLE, HeaderValue
from airflow_rbak.exceptions import RbakError

DEATH_HEADER = "x-death"
#: The most entries an ``x-death`` array may hold (RabbitMQ keeps one per queue and reason: a few).
MAX_DEATHS = 64
#: The longest exchange name or routing key, in UTF-8 bytes (AMQP short strings).
MAX_NAME_BYTES = 255


class DeathHeaderError(RbakError, ValueError):
    """A record's ``x-death`` header gives no route to replay it to; the message says why."""


def death_route(headers: Iterable[tuple[str, HeaderValue]]) -> tuple[str, str]:
    """The exchange and routing key of a record's most recent death; :class:`DeathHeaderError` when there is none."""
    deaths = [value for name, value in headers if name == DEATH_HEADER]
    if not deaths:
        raise DeathHeaderError("it has no x-death header (it was not dead-lettered, or the header was removed)")
    if len(deaths) > 1:
        raise DeathHeaderError("its x-death header appears more than once")
    death = deaths[0]
    if death.kind != ARRAY or not death.value:
        raise DeathHeaderError(f"its x-death header is {_kind(death)}, not an array of tables")
    if len(death.value) > MAX_DEATHS:
        raise DeathHeaderError(f"its x-death header holds {len(death.value)} entries, more than {MAX_DEATHS}")
    latest = death.value[0]
    if latest.kind != TABLE:
        raise DeathHeaderError(f"its latest x-death entry is {_kind(latest)}, not a table")
    fields = _fields(latest.value)
    exchange = _name(fields.get("exchange"), "exchange")
    keys = fields.get("routing-keys")
    if keys is None or keys.kind != ARRAY:
        raise DeathHeaderError(f"its latest x-death entry's routing-keys is {_kind(keys)}, not an array")
    if len(keys.value) != 1:
        raise DeathHeaderError(f"its latest x-death entry names {len(keys.value)} routing keys, not one (more than one: "
                               "it was also routed by CC, which a restore never publishes)")
    return exchange, _name(keys.value[0], "routing key")


def route_label(exchange: str, routing_key: str) -> str:
    """A route as plans name it (the default exchange by its name in the management UI)."""
    return f"exchange {exchange or '(AMQP default)'!r} with routing key {routing_key!r}"


def _fields(pairs: Any) -> dict[str, HeaderValue]:
    found: dict[str, HeaderValue] = {}
    for key, value in pairs:
        if key in found:
            raise DeathHeaderError(f"its latest x-death entry names {key!r:.40} twice")
        found[key] = value
    return found


def _name(value: HeaderValue | None, what: str) -> str:
    if value is None:
        raise DeathHeaderError(f"its latest x-death entry has no {what}")
    if value.kind in (LONG_STRING, SHORT_STRING):
        text = value.value
    elif value.kind == BYTES:
        try:
            text = bytes(value.value).decode("utf-8")
        except UnicodeDecodeError:
            raise DeathHeaderError(f"its latest x-death entry's {what} is not UTF-8") from None
    else:
        raise DeathHeaderError(f"its latest x-death entry's {what} is {_kind(value)}, not a string")
    if len(text.encode("utf-8")) > MAX_NAME_BYTES:
        raise DeathHeaderError(f"its latest x-death entry's {what} is longer than {MAX_NAME_BYTES} bytes")
    return text


def _kind(value: HeaderValue | None) -> str:
    return "missing" if value is None else f"a {value.kind}"


@dataclass
class DeathRoutes:
    """One queue's replay as the plan reads its selected records: how many go to each route, and which have none."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    unusable: int = 0
    first_unusable: tuple[int, str] | None = None

    def add(self, position: int, record: Any) -> None:
        """Count the record at ``position`` toward its route, or as having none."""
        try:
            route = death_route(record.headers)
        except DeathHeaderError as exc:
            self.unusable += 1
            if self.first_unusable is None:
                self.first_unusable = (position, str(exc))
            return
        self.counts[route] = self.counts.get(route, 0) + 1

    def exchanges(self) -> set[str]:
        """The exchanges the replay publishes into (the plan names them; the publish checks they exist)."""
        return {exchange for exchange, _ in self.counts}

    def table(self) -> tuple[tuple[str, str, int], ...]:
        """``(exchange, routing key, count)`` of every route, sorted."""
        return tuple((e, k, n) for (e, k), n in sorted(self.counts.items()))

    def refusal(self, label: str) -> str | None:
        """Why queue ``label`` cannot be replayed (None: every selected record has a route)."""
        if self.first_unusable is None:
            return None
        position, why = self.first_unusable
        return (f"dead-letter replay of {label}: {self.unusable} of {self.unusable + sum(self.counts.values())} "
                f"selected records have no usable x-death route; the first, at position {position}: {why}. Leave them "
                "out (select, positions) or restore the queue without replay_dead_letters")
