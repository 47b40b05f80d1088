"""What to restore and how: one frozen request, validated once (no I/O, no Airflow).

Times in a window are read as a message filter's window is (``epoch_ms``: epoch
milliseconds or ISO 8601, UTC without a zone). Either end may be left open.
Selection uses shell globs on source names; maps rename source vhosts and
queues in the target.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.repository.message_filter import epoch_ms as parse_time
from airflow_rbak.restore import selection
from airflow_rbak.restore.transformations import check_names, queue_type_rules

PUBLISH_MODES = ("queue", "exchange")
#: What a restore does when a target queue already holds messages: stop before touching anything, or add to them.
ON_EXISTING_MESSAGES = ("refuse", "append")
#: The most queues one publish task publishes at once (each holds a connection and a thread).
MAX_PUBLISH_THREADS = 32
#: How definitions are imported: create only what the target lacks, or also overwrite what it has.
DEFINITIONS_MODES = ("missing", "replace")
#: Restore checkpoints live in the backup's storage unless ``checkpoint_state`` names another place.
DEFAULT_CHECKPOINT_STATE = "backup"


def _globs(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ("*",)
    if isinstance(value, str):
        value = [v for v in (p.strip() for p in value.split(",")) if v]
    if not isinstance(value, Iterable) or not all(isinstance(v, str) and v for v in value):
        raise ConfigurationError(f"{name} must be a list of glob patterns (or one comma-separated string)")
    found = tuple(value)
    if not found:
        raise ConfigurationError(f"{name} must name at least one pattern; use ['*'] for everything")
    return found


def _mapping(value: Any, name: str) -> Mapping[str, str]:
    value = value or {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()):
        raise ConfigurationError(f"{name} must map non-empty source names to non-empty target names")
    return MappingProxyType(dict(value))


def _names(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in (p.strip() for p in value.split(",")) if v]
    if not isinstance(value, Iterable) or not all(isinstance(v, str) and v for v in value):
        raise ConfigurationError(f"{name} must be a list of names (or one comma-separated string)")
    return tuple(value)


def matches(name: str, patterns: Iterable[str]) -> bool:
    """True when ``name`` matches any of the shell globs (case-sensitive, as RabbitMQ names are)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class DefinitionsSelection:
    """Which parts of the saved definitions to import; selected queues pull in what routes to them."""

    vhosts: tuple[str, ...] = ("*",)
    queues: tuple[str, ...] = ("*",)
    exchanges: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "vhosts", _globs(self.vhosts, "definitions_selection.vhosts"))
        object.__setattr__(self, "queues", _globs(self.queues, "definitions_selection.queues"))
        exchanges = () if not self.exchanges else _globs(self.exchanges, "definitions_selection.exchanges")
        object.__setattr__(self, "exchanges", exchanges)

    @classmethod
    def from_value(cls, value: Any, vhosts: tuple[str, ...] = ("*",), queues: tuple[str, ...] = ("*",)) -> DefinitionsSelection:
        """Parse the setting; what it leaves out follows the restore's own ``vhosts`` and ``queues``."""
        if isinstance(value, DefinitionsSelection):
            return value
        if value is None:
            value = {}
        if not isinstance(value, Mapping) or set(value) - {"vhosts", "queues", "exchanges"}:
            raise ConfigurationError("definitions_selection must be an object with 'vhosts', 'queues' and/or 'exchanges'")
        given = {k: v for k, v in value.items() if v is not None}
        return cls(**{"vhosts": vhosts, "queues": queues, **given})


#: ``RestoreRequest.definitions_selection``'s default, told apart by identity: the restore's own vhosts and queues.
FOLLOWS_RESTORE = DefinitionsSelection()


@dataclass(frozen=True)
class RestoreRequest:
    """One restore, validated at construction (before any I/O); see the module docstring for formats."""

    storage_url: str
    backup_id: str = "latest"
    vhosts: tuple[str, ...] = ("*",)
    queues: tuple[str, ...] = ("*",)
    vhost_map: Mapping[str, str] = field(default_factory=dict)
    queue_map: Mapping[str, str] = field(default_factory=dict)
    #: Epoch milliseconds; given as ISO 8601 text too (``parse_time``).
    time_window_start: int | None = None
    time_window_end: int | None = None
    restore_definitions: bool = False
    #: Given as a mapping too, or None (the default): the restore's own ``vhosts`` and ``queues``.
    definitions_selection: DefinitionsSelection = FOLLOWS_RESTORE
    publish_mode: str = "queue"
    dry_run: bool = False
    max_publish_rate: float | None = None
    checkpoint_state: str = DEFAULT_CHECKPOINT_STATE
    skip_damaged_segments: bool = False
    restore_consumer_offsets: bool = False
    #: RabbitMQ refuses a ``user_id`` other than the publishing user's; set to publish such records without it.
    strip_user_id: bool = False
    allow_unroutable: bool = False
    on_existing_messages: str = "refuse"
    definitions_mode: str = "missing"
    #: The most a segment's records may take uncompressed; more is refused as a decompression bomb.
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    max_in_flight: int = 1000
    #: How many queues of one publish task (or of ``rbak restore``) are published at once, each on its own connection
    #: and thread; a recovery to a point in time always publishes with one (``RestoreRun.publish_threads``).
    publish_threads: int = 1
    #: Applied to the selected definitions before import (``restore.transformations``); needs restore_definitions.
    transformations: tuple[str, ...] = ()
    #: ``convert_to_quorum``'s rules: target queue name or glob -> ``quorum`` or ``classic``; default every queue.
    queue_types: tuple[tuple[str, str], ...] = ()
    #: Losses the user accepts, ``ARGUMENT`` or ``QUEUE_GLOB:ARGUMENT``; any other is refused.
    accept_losses: tuple[str, ...] = ()
    #: A message filter (``MessageFilter.from_params``'s mapping); only matching records are published (:mod:`.selection`).
    select: MessageFilter | None = None
    #: ``{"vhost/queue": [positions]}``: only these records, of only these queues (:mod:`.selection`).
    positions: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: Source queue globs whose records go back to where they died (their ``x-death``), not to the queue
    #: (:mod:`.dead_letters`); ``True`` is every queue.
    replay_dead_letters: tuple[str, ...] = ()
    #: Recovery to a point in time (:mod:`.journal_recovery`): the snapshot, then the journal's records published
    #: before this moment (epoch ms, or ISO 8601 as the window's ends); None: a plain restore of the backup.
    journal_until: int | None = None
    #: Recover through the gaps the journal has in the window (listed in the approval and the report) instead of
    #: refusing.
    journal_accept_gaps: bool = False
    #: Derived, never given: True when the definitions follow the backup's own vhosts (no vhosts, no selection named),
    #: so :meth:`definitions_of` narrows them to what the backup was asked for.
    definitions_follow_backup: bool = field(default=False, init=False, repr=False, compare=False)

    def definitions_of(self, backup_vhosts: tuple[str, ...] | None,
                       queue_vhosts: Iterable[str] = ()) -> DefinitionsSelection | None:
        """What to import from a backup asked for ``backup_vhosts`` whose selected queues live in ``queue_vhosts``.

        A definitions export holds every vhost of the source. Unless this restore names vhosts or a selection, only
        the vhosts the backup was asked for are imported; a manifest that does not say (``None``: another writer's
        backup, or one of every vhost) must not widen the import to every vhost, so then only the vhosts of the
        queues this restore selects. None: nothing to import (no such vhost)."""
        if not self.definitions_follow_backup:
            return self.definitions_selection
        vhosts = tuple(backup_vhosts or sorted(set(queue_vhosts)))
        if not vhosts:
            return None
        return dataclasses.replace(self.definitions_selection, vhosts=tuple(glob.escape(v) for v in vhosts))

    def __post_init__(self) -> None:
        if not isinstance(self.storage_url, str) or not self.storage_url:
            raise ConfigurationError("storage_url is required (file:///path, s3://bucket/prefix?..., memory://)")
        if not isinstance(self.backup_id, str) or not self.backup_id:
            raise ConfigurationError("backup_id must be a backup id or 'latest'")
        object.__setattr__(self, "vhosts", _globs(self.vhosts, "vhosts"))
        object.__setattr__(self, "queues", _globs(self.queues, "queues"))
        object.__setattr__(self, "vhost_map", _mapping(self.vhost_map, "vhost_map"))
        object.__setattr__(self, "queue_map", _mapping(self.queue_map, "queue_map"))
        object.__setattr__(self, "time_window_start", parse_time(self.time_window_start, "time_window_start"))
        object.__setattr__(self, "time_window_end", parse_time(self.time_window_end, "time_window_end"))
        start, end = self.time_window_start, self.time_window_end
        if start is not None and end is not None and start > end:
            raise ConfigurationError(f"time_window_start ({start}) is after time_window_end ({end})")
        # By default the definitions of exactly what is restored: a definitions export holds every vhost of the source.
        given = None if self.definitions_selection is FOLLOWS_RESTORE else self.definitions_selection
        selection = DefinitionsSelection.from_value(given, self.vhosts, self.queues)
        object.__setattr__(self, "definitions_selection", selection)
        object.__setattr__(self, "definitions_follow_backup", given is None and self.vhosts == ("*",))
        if self.publish_mode not in PUBLISH_MODES:
            raise ConfigurationError(f"publish_mode must be one of {list(PUBLISH_MODES)}, got {self.publish_mode!r}")
        if self.on_existing_messages not in ON_EXISTING_MESSAGES:
            raise ConfigurationError(
                f"on_existing_messages must be one of {list(ON_EXISTING_MESSAGES)}, got {self.on_existing_messages!r}")
        if self.definitions_mode not in DEFINITIONS_MODES:
            raise ConfigurationError(f"definitions_mode must be one of {list(DEFINITIONS_MODES)}, got {self.definitions_mode!r}")
        if self.max_publish_rate is not None and not self.max_publish_rate > 0:
            raise ConfigurationError("max_publish_rate must be > 0 messages per second, or None for no limit")
        if isinstance(self.max_decompressed_bytes, bool) or not isinstance(self.max_decompressed_bytes, int) \
                or self.max_decompressed_bytes < 1:
            raise ConfigurationError(f"max_decompressed_bytes must be a positive integer, got {self.max_decompressed_bytes!r}")
        if not isinstance(self.max_in_flight, int) or not 1 <= self.max_in_flight <= 65535:
            raise ConfigurationError("max_in_flight must be 1-65535 unconfirmed messages")
        if isinstance(self.publish_threads, bool) or not isinstance(self.publish_threads, int) \
                or not 1 <= self.publish_threads <= MAX_PUBLISH_THREADS:
            raise ConfigurationError(f"publish_threads must be an integer 1-{MAX_PUBLISH_THREADS}, got {self.publish_threads!r}")
        self._check_transformations()
        self._check_selection()
        self._check_journal()
        if not self.checkpoint_state:
            raise ConfigurationError("checkpoint_state must be 'backup' (in the backup's storage), a storage URL, "
                                     "or a local file path for a SQLite checkpoint database")

    def _check_transformations(self) -> None:
        object.__setattr__(self, "transformations", check_names(_names(self.transformations, "transformations")))
        object.__setattr__(self, "queue_types", queue_type_rules(self.queue_types))
        object.__setattr__(self, "accept_losses", _names(self.accept_losses, "accept_losses"))
        if self.transformations and not self.restore_definitions:
            raise ConfigurationError("transformations change the definitions a restore imports: set restore_definitions")
        if (self.queue_types or self.accept_losses) and "convert_to_quorum" not in self.transformations:
            raise ConfigurationError("queue_types and accept_losses are rules of the convert_to_quorum transformation; "
                                     "name it in transformations")

    def _check_selection(self) -> None:
        object.__setattr__(self, "select", _message_filter(self.select))
        object.__setattr__(self, "positions", selection.parse_positions(self.positions))
        replay = self.replay_dead_letters
        replay = ("*",) if replay is True else () if replay in (False, None) else _names(replay, "replay_dead_letters")
        object.__setattr__(self, "replay_dead_letters", replay)

    def _check_journal(self) -> None:
        object.__setattr__(self, "journal_until", parse_time(self.journal_until, "journal_until"))
        if not isinstance(self.journal_accept_gaps, bool):
            raise ConfigurationError("journal_accept_gaps must be true or false")
        if self.journal_until is None:
            if self.journal_accept_gaps:
                raise ConfigurationError("journal_accept_gaps is a setting of a recovery to a point in time: set "
                                         "journal_until")
            return
        # the journal's records go through the target's own routing, to any queue of the vhost: a recovery is of
        # whole vhosts, named exactly, and nothing narrows which of their messages come back
        if any(ch in v for v in self.vhosts for ch in "*?["):
            raise ConfigurationError("journal_until recovers whole vhosts: name each in vhosts (no globs)")
        narrowing = [name for name, given in (
            ("queues", self.queues != ("*",)), ("time_window_start", self.time_window_start is not None),
            ("time_window_end", self.time_window_end is not None), ("select", self.select is not None),
            ("positions", bool(self.positions)), ("replay_dead_letters", bool(self.replay_dead_letters)),
            ("publish_mode", self.publish_mode != "queue")) if given]
        if narrowing:
            raise ConfigurationError(f"journal_until recovers every message of its vhosts up to that moment; it does "
                                     f"not combine with {', '.join(narrowing)}")

    @property
    def selective(self) -> bool:
        """True when a filter or chosen positions narrow the records (beyond the window)."""
        return self.select is not None or bool(self.positions)

    def selection_label(self) -> str | None:
        """The selection in one line, as the plan, the approval and the report name it (None: none)."""
        return selection.describe(self.select, self.positions)

    def replays(self, queue: str) -> bool:
        """True when records of source queue ``queue`` are replayed to where they died (``replay_dead_letters``)."""
        return matches(queue, self.replay_dead_letters)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> RestoreRequest:
        """Settings from a restore DAG run's conf (the same names as its params); unknown names are refused."""
        unknown = sorted(set(conf) - set(CONF_NAMES))
        if unknown:
            raise ConfigurationError(f"unknown restore settings {unknown}; known: {list(CONF_NAMES)}")
        return cls(**dict(conf))

    def in_window(self, stamp: int) -> bool:
        """True when a ``backed_up_at`` lies in the window (both ends inclusive)."""
        start, end = self.time_window_start, self.time_window_end
        return (start is None or stamp >= start) and (end is None or stamp <= end)

    @property
    def has_window(self) -> bool:
        """True when either end of the window is set (otherwise every record is inside)."""
        return self.time_window_start is not None or self.time_window_end is not None

    def window_label(self) -> str:
        """The window as text, for checkpoints (a resumed run must use the same window) and logs."""
        label = f"{self.time_window_start}..{self.time_window_end}"
        return label if self.journal_until is None else f"{label} journal<{self.journal_until}"

    def selects(self, vhost: str, queue: str) -> bool:
        return matches(vhost, self.vhosts) and matches(queue, self.queues)

    def target_vhost(self, vhost: str) -> str:
        return self.vhost_map.get(vhost, vhost)

    def target_queue(self, queue: str) -> str:
        return self.queue_map.get(queue, queue)


def _message_filter(value: Any) -> MessageFilter | None:
    """The ``select`` setting as a message filter (None: no filter, or one that selects everything); the filter's
    own checks raise :class:`~airflow_rbak.repository.message_filter.FilterError` naming the field."""
    if value is None:
        return None
    if not isinstance(value, MessageFilter):
        if not isinstance(value, Mapping):
            raise selection.SelectionError('select must be an object of message filters, e.g. {"routing_key": "pay.*"}')
        value = MessageFilter.from_params(value)
    return None if value.selects_all else value


#: The settings a restore takes from its DAG params or ``rbak restore --conf``: every field given at construction but
#: the internal ``max_in_flight``. The DAG and the command line both read this tuple.
CONF_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RestoreRequest) if f.init and f.name != "max_in_flight")
