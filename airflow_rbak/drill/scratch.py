"""The scratch vhosts a restore drill restores into: named so that they cannot be mistaken, marked when created,
and deleted only when they carry the mark.

A drill never touches a vhost it did not create. Its scratch vhost's name is :data:`PREFIX`, a token of the drill's
run id and the source vhost's place in the drill (``rbak-drill-manual_2026-11-27T16_30_00-3f9a1c2e-0``); it refuses
to start when that name exists, and records :func:`marker` as the vhost's description when it creates it. Cleanup
reads the description back and deletes the vhost only when it is exactly that marker, so a vhost someone made by
hand under a drill's name, or another run's scratch vhost, stays.
"""

from __future__ import annotations

import hashlib
import re

from airflow_rbak.broker import management_admin
from airflow_rbak.broker.errors import BrokerError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.display import package_logger
from airflow_rbak.exceptions import RbakError

#: Every scratch vhost's name starts with this.
PREFIX = "rbak-drill-"
#: The tag a scratch vhost carries (for people listing vhosts; the description is what cleanup checks).
TAG = "rbak-drill"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

log = package_logger(__name__)


class ScratchVhostError(RbakError):
    """A scratch vhost could not be created (its name exists) or deleted; names the vhost."""


def run_prefix(run_id: str) -> str:
    """What every scratch vhost of one drill run starts with: readable, and unique to the run id."""
    token = _UNSAFE.sub("_", run_id).strip("_")[:60]
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return f"{PREFIX}{token}-{digest}-"


def scratch_names(run_id: str, count: int) -> list[str]:
    """The scratch vhosts of one drill run, one per source vhost it restores (numbered from 0)."""
    return [f"{run_prefix(run_id)}{i}" for i in range(count)]


def leftovers(client: ManagementClient, run_id: str) -> list[str]:
    """The vhosts named as this run's scratch vhosts that still exist (a drill stopped before its cleanup)."""
    prefix = run_prefix(run_id)
    return sorted(v for v in client.vhosts() if v.startswith(prefix) and v[len(prefix):].isdigit())


def marker(vhost: str, run_id: str) -> str:
    """The description a drill records on the scratch vhost it creates, and checks before deleting it."""
    return f"airflow-rbak restore drill scratch vhost {vhost} of run {run_id}; deleted by the drill"


def create(client: ManagementClient, vhost: str, run_id: str) -> None:
    """Create the scratch vhost, marked; refuse (nothing created) when a vhost of that name exists."""
    try:
        management_admin.create_marked_vhost(client, vhost, marker(vhost, run_id), TAG)
    except BrokerError as exc:
        raise ScratchVhostError(f"scratch vhost {vhost!r} not created: {exc}") from None
    log.info("created scratch vhost %s", vhost)


def delete_own(client: ManagementClient, vhost: str, run_id: str) -> bool:
    """Delete the scratch vhost if it exists and carries this run's marker; True when deleted.

    A vhost of that name without the marker is left alone and refused (:class:`ScratchVhostError`), never deleted.
    """
    try:
        described = management_admin.vhost_description(client, vhost)
        if described is None:
            return False
        if described != marker(vhost, run_id):
            raise ScratchVhostError(f"vhost {vhost!r} does not carry this drill's marker (its description is "
                                    f"{described[:120]!r}); it was not created by run {run_id!r} and is left alone")
        management_admin.delete_vhost(client, vhost)
    except BrokerError as exc:
        raise ScratchVhostError(f"scratch vhost {vhost!r} not deleted: {exc}; delete it by hand") from None
    log.info("deleted scratch vhost %s", vhost)
    return True
