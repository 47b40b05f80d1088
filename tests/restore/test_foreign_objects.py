"""Issue 14, Must show 4 (restore side): a manifest that points at another backup's segment or definitions is refused
before anything is read from that object, imported or published."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import quote

import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore import BackupNotRestorableError, RestoreRequest, RestoreRun
from airflow_rbak.storage import open_storage
from tests.restore.helpers import backup, declare, publish

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("what", ["segment", "definitions"])
def test_a_manifest_naming_another_backups_object_is_refused(broker, vhost, target_vhost, tmp_path, what):
    # Given two backups of one queue (5 messages, then 8), the second's manifest pointing at the first's object
    declare(broker.connection, vhost, {"orders": "classic"})
    publish(broker.connection, vhost, "orders", 0, 5)
    location = (tmp_path / "b").as_uri()
    first = backup(broker.connection, location, "old-1", vhost)
    publish(broker.connection, vhost, "orders", 5, 3)
    store = ManifestStore(open_storage(location))
    backup(broker.connection, location, "new-1", vhost)
    second = store.load("new-1")
    if what == "segment":
        second.queues[0].segments[0] = replace(first.queues[0].segments[0])
        second.refresh_totals()
        borrowed = first.queues[0].segments[0].key
    else:
        second.definitions = replace(first.definitions)
        borrowed = first.definitions.key
    store.save(second)
    settings = RestoreRequest(location, backup_id="new-1", vhosts=[vhost], vhost_map={vhost: target_vhost},
                               restore_definitions=True, checkpoint_state=str(tmp_path / "r.db"))

    # When it is restored into a vhost of its own
    with pytest.raises(BackupNotRestorableError) as refused:
        RestoreRun(broker.connection, settings).run()

    # Then the restore names the borrowed object and what to do, and the target was not touched (no vhost, no snapshot)
    assert borrowed in str(refused.value) and "not an object of backup 'new-1'" in str(refused.value)
    assert "rbak validate" in str(refused.value)
    assert target_vhost not in [v["name"] for v in broker.api("GET", "vhosts").json()]
    assert [i.key for i in open_storage(location).list("new-1/definitions/rollback-")] == []
    assert broker.api("GET", f"queues/{quote(vhost, safe='')}/orders").status_code == 200
