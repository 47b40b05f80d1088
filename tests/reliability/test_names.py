"""Hostile vhost and queue names: backed up and restored under the same names, and no key leaves its backup.

Names with ``/``, ``..``, ``%``, ``\\``, spaces, unicode and 255 bytes (the AMQP short-string limit) on
the real broker, on a folder and on loopback S3. RabbitMQ's HTTP server cannot address ``.`` and ``..``
in a URL, so the vhost ``..`` is made (and restored) through the global definitions endpoint.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pika
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.management_admin import ensure_vhost
from airflow_rbak.broker.pika_connection import blocking_connection
from airflow_rbak.codec import BackupRecord
from airflow_rbak.codec.layout import MAX_NAME_SEGMENT_BYTES, decode_name, encode_name, is_shortened, queue_prefix
from airflow_rbak.repository.rebuild import rebuild_manifest
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.storage import check_key, open_storage
from tests.repository.backup_writer import BackupWriter
from tests.restore.helpers import body_of, declare, message_view, props_of, publish

LONG_ASCII = "q" * 255
LONG_SLASHES = "é/" * 85  # 255 bytes that encode to 765
QUEUES = ["..", ".", "a/b/../c", "%41%2F%", "with space", "ünï✓ 名前", LONG_ASCII, LONG_SLASHES, "back\\slash"]
COUNT = 2


def hostile_vhosts(tag: str) -> list[str]:
    """Vhost names of each kind; unique per test but ``..``, of which there can be only one."""
    return ["..", f"{tag}/a/..", f"{tag} %2F% ünï✓", bytes_255(tag + "é/" * 85)]


def bytes_255(text: str) -> str:
    """``text`` cut to at most 255 UTF-8 bytes, padded with ``x`` to exactly 255."""
    cut = text.encode()[:255].decode("utf-8", errors="ignore")
    return cut + "x" * (255 - len(cut.encode()))


@pytest.fixture
def hostile(broker):
    """Vhosts with hostile names (each with one queue named like itself), and one vhost holding every hostile
    queue name; two messages in each queue. Deleted afterwards."""
    tag = f"n{uuid.uuid4().hex[:6]}"
    layout = {v: [v if v != ".." else "..."] for v in hostile_vhosts(tag)}
    layout[f"{tag}-queues"] = QUEUES
    drop_vhost(broker, "..")  # left by an interrupted run, perhaps
    with ManagementClient(broker.connection) as client:
        for vhost in layout:
            ensure_vhost(client, vhost)
    for vhost, queues in layout.items():
        declare(broker.connection, vhost, {q: "classic" for q in queues})
        for queue in queues:
            publish(broker.connection, vhost, queue, 0, COUNT)
    yield layout
    for vhost in layout:
        drop_vhost(broker, vhost)


def drop_vhost(broker, vhost: str) -> None:
    """Delete a vhost; ``..`` has no URL, so its queues go instead (and the vhost too where rabbitmqctl can)."""
    if vhost != "..":
        broker.api("DELETE", f"vhosts/{quote(vhost, safe='')}")
        return
    if vhost not in [v["name"] for v in broker.api("GET", "vhosts").json()]:
        return
    with pika.BlockingConnection(broker.connection.pika_parameters(vhost)) as conn:
        channel = conn.channel()
        for queue in [q["name"] for q in broker.api("GET", "queues").json() if q["vhost"] == vhost]:
            channel.queue_delete(queue)
    if os.environ.get("RBAK_RABBIT_NODE"):
        try:
            broker.ctl("delete_vhost", "..")
        except subprocess.CalledProcessError:
            pass  # its queues are gone; a vhost left behind holds nothing


def stored_keys(location: str, s3_client) -> list[str]:
    """Every object under the location as the backend itself names it (files on disk, keys in the bucket)."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        root = Path(unquote(parts.path))
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    listed = s3_client.list_objects_v2(Bucket=parts.netloc, Prefix=parts.path.lstrip("/") + "/")
    return sorted(o["Key"].split("/", 1)[1] for o in listed.get("Contents", []))


@pytest.mark.broker
def test_hostile_names_are_backed_up_and_restored_under_the_same_names(broker, hostile, tmp_path):
    # Given queues with hostile names in vhosts with hostile names
    location = (tmp_path / "backups").as_uri()

    # When they are backed up, their vhosts dropped, and the backup restored with its definitions
    selector = QueueSelector(vhosts=tuple(hostile))
    manifest = BackupRun(broker.connection, BackupSettings("names-1", location, selector=selector)).run()
    for vhost in hostile:
        drop_vhost(broker, vhost)
    settings = RestoreRequest(location, backup_id="names-1", restore_definitions=True,
                               checkpoint_state=str(tmp_path / "restore.db"))
    report = RestoreRun(broker.connection, settings).run()

    # Then every queue came back under its own name in its own vhost, byte-exact and in order
    expected = {(v, q) for v, queues in hostile.items() for q in queues}
    assert {(q.vhost, q.name): q.message_count for q in manifest.queues} == {key: COUNT for key in expected}
    assert report.published == report.planned == COUNT * len(expected)
    for vhost, queue in sorted(expected):
        assert drain(broker, vhost, queue) == [message_view(props_of(i), body_of(i, 300)) for i in range(COUNT)], (vhost, queue)
    # and every file lies under names-1/, in path segments any file system takes
    assert_contained(stored_keys(location, None), "names-1")
    assert validate_backup(open_storage(location), "names-1", deep=True).valid


def drain(broker, vhost: str, queue: str) -> list[tuple]:
    """Every message of a classic queue, in order, taken with basic.get until it is empty."""
    found = []
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:  # typed headers, as message_view reads them
        channel = conn.channel()
        while True:
            method, props, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return found
            found.append(message_view(props, body))


def assert_contained(keys: list[str], backup_id: str) -> None:
    """Every key under ``{backup_id}/``, each path segment within the limit, the whole key well within S3's."""
    assert keys and all(k.startswith(f"{backup_id}/") for k in keys), [k for k in keys if not k.startswith(f"{backup_id}/")]
    assert max(len(part.encode()) for k in keys for part in k.split("/")) <= MAX_NAME_SEGMENT_BYTES
    assert max(len(k.encode()) for k in keys) < 1024 - 200  # room for a bucket prefix


def test_hostile_names_keep_their_layout_on_every_backend_and_a_rebuild_recovers_them(location, request):
    # Given a backup of queues with every kind of hostile name, written to a folder and to loopback S3
    s3_client = request.getfixturevalue("s3_client") if location.startswith("s3:") else None
    storage = open_storage(location)
    writer = BackupWriter(storage, "names-2")
    names = [(v, q) for v in ("/", "..", "é/" * 85, bytes_255("%/ ü")) for q in QUEUES]
    for vhost, name in names:
        sink = writer.queue(vhost, name)
        sink.add_all(BackupRecord(body=bytes([i]), backed_up_at=i, source_queue=name, source_vhost=vhost) for i in range(3))
        sink.close()
    original = writer.finish()

    # When its keys are listed by the backend itself, and the manifest is rebuilt from the segments
    keys = stored_keys(location, s3_client)
    storage.delete("names-2/manifest.json")
    rebuilt = rebuild_manifest(storage, "names-2")

    # Then nothing lies outside names-2/, the backup validates, and each queue has its full name back
    assert_contained(keys, "names-2")
    assert [u for u in rebuilt.unrecovered if not u.startswith("definitions:")] == []  # (none were written)
    assert sorted((q.vhost, q.name, q.message_count) for q in rebuilt.manifest.queues) == \
        sorted((q.vhost, q.name, q.message_count) for q in original.queues) == sorted((v, q, 3) for v, q in names)
    assert validate_backup(storage, "names-2", deep=True).valid
    for queue in original.queues:
        assert all(s.key.startswith(queue_prefix("names-2", queue.vhost, queue.name)) for s in queue.segments)


names = st.text(st.characters(exclude_categories=("Cs",)), max_size=300) | st.sampled_from(QUEUES)


@settings(max_examples=300, deadline=None)
@given(names, names)
def test_any_name_maps_to_one_safe_bounded_segment_and_distinct_names_to_distinct_segments(a, b):
    segment = encode_name(a)

    assert check_key(f"id/{segment}/x") and "/" not in segment
    assert len(segment.encode()) <= MAX_NAME_SEGMENT_BYTES
    assert is_shortened(segment) or decode_name(segment) == a
    assert (encode_name(b) == segment) == (a == b)
