"""Who may point a run where, and who may approve a restore: the ``[rbak]`` access rules, decided without Airflow.

Whoever may trigger a DAG chooses its params, and the workers reach more than that person should: every path and
bucket the worker's credentials open, every Airflow connection. So a param may name only the storage locations and
connections an administrator listed (:class:`AccessPolicy`), and a restore is approved by someone other than the
person who asked for it, unless an administrator said otherwise (:class:`ApprovalRules`). ``settings.RbakSettings``
builds both from the options; the operators enforce them (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.registry import backend_of
from airflow_rbak.storage.url import holds_credentials, parse_storage_url

#: In an allowlist: any location, or any connection (an administrator's explicit choice to trust every triggerer).
ANY = "*"
#: The DAG params that name a storage location (``checkpoint_state``: a URL or a local SQLite file, or ``backup``).
LOCATION_PARAMS = ("storage_url", "storage_urls", "checkpoint_state", "copy_to")
#: The DAG params that name an Airflow connection.
CONNECTION_PARAMS = ("rabbitmq_conn_id", "spark_conn_id")
#: The connections each shipped DAG names by default (its ``Param`` defaults are read from here): always allowed,
#: whatever ``[rbak] allowed_conn_ids`` lists, so a run with the shipped params is never refused by the allowlist and an
#: administrator who lists their own connections does not refuse the scheduled backups (docs/security.md).
DAG_DEFAULT_CONNECTIONS: dict[str, dict[str, str]] = {
    "rbak_backup": {"rabbitmq_conn_id": "rabbitmq_default", "spark_conn_id": "spark_default"},
    "rbak_verify": {"spark_conn_id": "spark_default"},
    "rbak_restore": {"rabbitmq_conn_id": "rabbitmq_default"},
    "rbak_drill": {"rabbitmq_conn_id": "rabbitmq_drill"},
    "rbak_journal": {"rabbitmq_conn_id": "rabbitmq_default"},
}
#: Every connection :data:`DAG_DEFAULT_CONNECTIONS` names, once.
DEFAULT_CONN_IDS = tuple(dict.fromkeys(c for names in DAG_DEFAULT_CONNECTIONS.values() for c in names.values()))
#: ``checkpoint_state`` that keeps restore checkpoints beside the backup: no location of its own.
IN_BACKUP_STORAGE = "backup"


#: A location as the access rules compare it: its scheme, its container and its path segments.
Place = tuple[str, tuple[Any, ...], tuple[str, ...]]


def _place(url: str) -> Place:
    """What identifies a location: its scheme, and what its backend says identifies it (``Backend.place``).

    A container (bucket, account, endpoint) must be the same exactly; paths compare segment by segment after the
    backend's normalisation (a folder's ``..`` resolved and symlinks followed), so ``/backups-evil`` is not below
    ``/backups``. Region, encryption and path style do not move a location.
    """
    config = parse_storage_url(url)
    backend = backend_of(config)
    container, segments = backend.place(config)
    return backend.scheme, container, segments



def _within(place: Place, allowed: Place) -> bool:
    return place[:2] == allowed[:2] and place[2][:len(allowed[2])] == allowed[2]


def location_within(url: str, allowed: str) -> bool:
    """Whether ``url`` is the location ``allowed`` names or one below it (either may be a plain path)."""
    return _within(_place(url), _place(allowed))


def check_allowed_locations(urls: Iterable[str], option: str) -> None:
    """Refuse, naming ``option``, an entry that is neither :data:`ANY` nor a storage location."""
    for url in urls:
        if url != ANY:
            try:
                _place(url)
            except ConfigurationError as exc:
                raise ConfigurationError(f"[rbak] {option}: {exc}") from None


def _shown(url: str) -> str:
    """A location as a refusal may repeat it: never one that may hold credentials."""
    return "(a URL holding credentials)" if holds_credentials(url) else repr(url)


@dataclass(frozen=True)
class AccessPolicy:
    """The storage locations and connections a DAG param may name; :data:`ANY` in either allows everything."""

    storage_urls: tuple[str, ...]
    conn_ids: tuple[str, ...]

    def _allowed_places(self) -> list[Place]:
        places = []
        for allowed in self.storage_urls:
            try:
                places.append(_place(allowed))
            except ConfigurationError:
                continue  # a ui_locations entry the backups view shows as refused: it allows nothing
        return places

    def location_refusal(self, param: str, url: str) -> str | None:
        """Why ``url`` may not be named by ``param``, or None when it is allowed."""
        if ANY in self.storage_urls or (param == "checkpoint_state" and url == IN_BACKUP_STORAGE):
            return None
        try:
            place = _place(url)
        except ConfigurationError as exc:
            return f"param {param} is not a storage location ({exc})"
        if any(_within(place, allowed) for allowed in self._allowed_places()):
            return None
        return (f"param {param} names {_shown(url)}, which is not an allowed storage location; an administrator "
                f"allows it by adding it (or a location above it) to [rbak] allowed_storage_urls")

    def connection_refusal(self, param: str, conn_id: str) -> str | None:
        """Why ``conn_id`` may not be named by ``param``, or None when it is allowed."""
        if ANY in self.conn_ids or conn_id in self.conn_ids:
            return None
        return (f"param {param} names connection {conn_id!r}, which is not an allowed connection; an administrator "
                f"allows it by adding it to [rbak] allowed_conn_ids")

    def refusals(self, params: Mapping[str, Any]) -> list[str]:
        """Every param of ``params`` that names a location or connection it may not, each with its reason."""
        found: list[str | None] = []
        for name in LOCATION_PARAMS:
            value = params.get(name)
            for url in ([value] if isinstance(value, str) else value or []):
                found.append(self.location_refusal(name, str(url)))
        for name in CONNECTION_PARAMS:
            if isinstance(params.get(name), str):
                found.append(self.connection_refusal(name, params[name]))
        return [f for f in found if f]


@dataclass(frozen=True)
class ApprovalRules:
    """Who may answer a restore's approval, and whether a run may skip it.

    ``approvers`` are Airflow user ids (empty: whoever Airflow lets answer the task); unless
    ``trigger_user_may_approve``, the user who triggered the run never approves it.
    """

    approvers: tuple[str, ...] = ()
    trigger_user_may_approve: bool = False
    skip_allowed: bool = False

    def skip_refusal(self) -> str:
        """The refusal of ``skip_approval`` where it is not allowed."""
        return ("skip_approval is set, but [rbak] allow_skip_approval is off, so every restore waits for a person to "
                "approve its plan; nothing was imported or published (an administrator sets [rbak] "
                "allow_skip_approval = True where unattended restores are wanted)")

    def assigned(self, triggering_user: str | None) -> tuple[str, ...]:
        """The users Airflow should let answer (empty: any user it allows); refuses when nobody would be left."""
        if not self.approvers:
            return ()
        left = tuple(u for u in self.approvers if self.trigger_user_may_approve or u != triggering_user)
        if not left:
            raise ConfigurationError(
                f"[rbak] restore_approvers names only {triggering_user!r}, who triggered this run and may not approve "
                "it ([rbak] approval_by_trigger_user_allowed); nothing was imported or published")
        return left

    def approval_refusal(self, responder: Iterable[str | None], triggering_user: str | None) -> str | None:
        """Why an Approve from ``responder`` (its id and name) does not count, or None when it does."""
        names = {r for r in responder if r}
        if not self.trigger_user_may_approve and triggering_user and triggering_user in names:
            return (f"{triggering_user} triggered this run and may not approve it ([rbak] "
                    f"approval_by_trigger_user_allowed is off); another approver must answer")
        if self.approvers and names.isdisjoint(self.approvers):
            return f"{' / '.join(sorted(names)) or 'an unknown user'} is not in [rbak] restore_approvers"
        return None
