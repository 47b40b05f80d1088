"""The location: reachable and writable (a probe object written, read back and deleted under location state, never
beside a backup), and its encryption marker against the configured keys."""

from __future__ import annotations

import uuid

from airflow_rbak.codec.layout import is_location_state, preflight_probe_key
from airflow_rbak.doctor.deployment import Deployment
from airflow_rbak.doctor.findings import Finding, failure, ok, warning
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.storage import open_backend
from airflow_rbak.storage.base import Storage, StorageError
from airflow_rbak.storage.encrypted import MARKER_KEY, DamagedObjectError, EncryptedStorage, WrongKeyError
from airflow_rbak.storage.url import parse_storage_url

#: An object read whole to check the keys against: a manifest or a checkpoint, not a segment.
SAMPLE_MAX_BYTES = 1024**2
#: How many objects are looked at for one that small.
SAMPLE_LOOK = 1000


def location_findings(d: Deployment) -> list[Finding]:
    """The storage probe, then the encryption check (on the bare backend: the probe marks nothing)."""
    try:
        backend = open_backend(parse_storage_url(d.storage_url))
    except ConfigurationError as exc:
        return [failure("storage", str(exc), "correct [rbak] storage_url (or --path)")]
    found = [storage_finding(backend)]
    try:
        found += encryption_findings(d, backend)
    except StorageError as exc:
        found.append(failure("encryption", f"not checked: {exc}", "make the location readable first (see storage)",
                             unreachable=True))
    return found


def storage_finding(backend: Storage) -> Finding:
    """Write, read back and delete a probe object under the location's state prefix."""
    key = preflight_probe_key(uuid.uuid4().hex[:16])
    data = f"rbak doctor probe {key}\n".encode()
    try:
        backend.put(key, data)
        try:
            if backend.get(key) != data:
                return failure("storage", f"{backend.url}: the probe {key} read back different bytes",
                               "check the storage (a proxy or a lifecycle rule rewriting objects?)")
        finally:
            backend.delete(key)
    except RbakError as exc:
        return failure("storage", f"{backend.url} is not writable: {exc}", "create the folder or bucket and give "
                       "Airflow's workers write, read, list and delete there (or correct [rbak] storage_url / "
                       "storage_conn_id)", unreachable=True)
    return ok("storage", f"{backend.url}: wrote, read back and deleted {key}")


def encryption_findings(d: Deployment, backend: Storage) -> list[Finding]:
    """The marker against the keys; where the keys live (a warning when only Airflow's database holds them)."""
    if d.keys_problem:
        return [failure("encryption", d.keys_problem, "correct the encryption connection's password: "
                        "id:base64-key entries, the writing key first")]
    marked = backend.exists(MARKER_KEY)
    found = [_marker_finding(d, backend, marked)]
    source = d.keys_source
    if d.keyring is not None and source is not None:
        if source.outside_airflow is False:
            found.append(warning("encryption keys", f"read from {source.where}, and no copy outside Airflow is "
                                 "evident: without that database no one can read these backups", "keep the keyring "
                                 "in a secrets backend (or at least a copy in your vault) and say so to rbak "
                                 "through RBAK_ENCRYPTION_KEYS on a disaster-recovery host"))
        else:
            found.append(ok("encryption keys", f"read from {source.where}"))
    return found


def _marker_finding(d: Deployment, backend: Storage, marked: bool) -> Finding:
    keyring = d.keyring
    if keyring is None:
        if marked:
            return failure("encryption", f"{backend.url} is an encrypted location and no encryption keys are "
                           "configured: every read and write is refused", "set [rbak] encryption_conn_id to the "
                           "connection holding its keys (rbak: --encryption-conn-id or RBAK_ENCRYPTION_KEYS)")
        return ok("encryption", "the location is not encrypted and no keys are configured")
    ids = ", ".join(keyring.ids)
    sample = _sample(backend)
    if not marked:
        if sample is not None:
            return failure("encryption", f"keys are configured (ids {ids}) but {backend.url} holds plain objects "
                           f"({sample}): an encrypting writer refuses it", "unset [rbak] encryption_conn_id, or "
                           "encrypt into a new, empty location (rbak export copies a location)")
        return ok("encryption", f"keys {ids}; the location is empty and its first backup marks it encrypted")
    if sample is None:
        return ok("encryption", f"encrypted; keys {ids}; no object yet to check them against")
    try:
        EncryptedStorage(backend, keyring).get(sample)
    except WrongKeyError as exc:
        return failure("encryption", f"the configured keys (ids {ids}) do not open the location: {exc}",
                       "add the key the location was sealed with to the encryption connection (id:base64-key, "
                       "the writing key first)")
    except DamagedObjectError as exc:
        return warning("encryption", f"keys {ids}; the object checked is damaged: {exc}",
                       "rbak validate --deep --backup-id latest")
    return ok("encryption", f"encrypted; keys {ids} open {sample}")


def _sample(backend: Storage) -> str | None:
    """A small object of the location that is not its marker nor location state; None when it holds none."""
    for looked, info in enumerate(backend.list()):
        if looked >= SAMPLE_LOOK:
            break
        if info.key != MARKER_KEY and not is_location_state(info.key) and info.size <= SAMPLE_MAX_BYTES:
            return info.key
    return None
