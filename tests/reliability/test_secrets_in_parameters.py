"""Credentials in runtime parameters: federation upstreams, shovels, any parameter carrying a URI.

A broker that federates or shovels holds URIs with user names and passwords in
its definitions. With ``include_users=False`` the backup must hold none of
them, in any encoding, and a restore's rollback snapshot none either (a restore
never changes users or parameters, so the snapshot never needs them): the test
searches every stored byte, compressed objects decompressed.
"""

from __future__ import annotations

from urllib.parse import quote

import orjson
import pytest

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.definitions import REDACTED_USERINFO
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.codec.compression import decompress
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.storage import open_storage
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.reliability.secrets import leaks, stored_objects
from tests.restore.helpers import declare

pytestmark = pytest.mark.broker


def uri_of(broker, user, vhost: str, suffix: str = "") -> str:
    """An AMQP URI with the user's name and password, percent-encoded as a URI must carry them."""
    auth = f"{quote(user.name, safe='')}:{quote(user.password, safe='')}"
    return f"amqp://{auth}@127.0.0.1:{broker.connection.amqp_port}/{quote(vhost, safe='')}{suffix}"


def test_include_users_false_keeps_federation_and_shovel_credentials_out_of_backup_and_rollback(
        broker, vhost, secret_user, tmp_path):
    # Given a broker with a federation upstream, a dynamic shovel and a global parameter, all carrying the
    # password of a user whose password is distinctive
    declare(broker.connection, vhost, {"orders": "classic", "shovelled": "classic"})
    v = quote(vhost, safe="")
    uri = uri_of(broker, secret_user, vhost)
    broker.api("PUT", f"parameters/federation-upstream/{v}/origin", json={"value": {"uri": uri, "expires": 3600000}})
    broker.api("PUT", f"parameters/shovel/{v}/mover", json={"value": {
        "src-protocol": "amqp091", "src-uri": uri, "src-queue": "orders",
        "dest-protocol": "amqp091", "dest-uri": [uri, uri_of(broker, secret_user, vhost, "?heartbeat=5")],
        "dest-queue": "shovelled"}})
    global_name = f"rbak-mirror-{vhost}"
    broker.api("PUT", f"global-parameters/{global_name}", json={"name": global_name, "value": {"target": {"uri": uri}}})
    location = (tmp_path / "b").as_uri()
    try:
        # When a backup leaves users out, and a restore with definitions saves a rollback snapshot
        manifest = BackupRun(broker.connection, BackupSettings(
            "fed-1", location, selector=QueueSelector(vhosts=(vhost,)),
            include_users=False)).run()
        report = RestoreRun(broker.connection, RestoreRequest(
            location, backup_id="fed-1", queue_map={"orders": "restored", "shovelled": "restored-2"},
            restore_definitions=True, checkpoint_state=str(tmp_path / "r.db"))).run()
    finally:
        broker.api("DELETE", f"global-parameters/{global_name}")

    # Then no form of the password or its hash is in any stored byte, the snapshot included ...
    storage = open_storage(location)
    objects = stored_objects(storage)
    snapshot_key = report.definitions["rollback_key"]
    assert f"storage {snapshot_key}" in objects and f"storage {manifest.definitions.key}" in objects
    assert leaks(secret_user, objects) == []
    # ... nor the user's name in a URI, while the parameters themselves are kept with their user info redacted
    for key in (manifest.definitions.key, snapshot_key):
        doc = orjson.loads(decompress(storage.get(key), compression_from_key(key), 1 << 28, key))
        parameters = [p for p in doc["parameters"] if p["vhost"] == vhost]
        assert sorted(p["component"] for p in parameters) == ["federation-upstream", "shovel"], key
        shovel = next(p["value"] for p in parameters if p["component"] == "shovel")
        assert shovel["src-uri"].startswith(f"amqp://{REDACTED_USERINFO}@127.0.0.1:")
        assert all(u.startswith(f"amqp://{REDACTED_USERINFO}@") for u in shovel["dest-uri"])
        mirror = next(p for p in doc["global_parameters"] if p["name"] == global_name)
        assert mirror["value"]["target"]["uri"].startswith(f"amqp://{REDACTED_USERINFO}@")
        assert secret_user.name.encode() not in orjson.dumps(doc["parameters"] + doc["global_parameters"])
