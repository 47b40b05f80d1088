"""``rbak limit-stops``: a location's delivery-limit stops as the location and this deployment's ledger hold them,
and the one deliberate way to clear a stop (both places), with the tasks' own state key and ledger folder."""

from __future__ import annotations

import json

from airflow_rbak.broker.discovery import QueueInfo
from airflow_rbak.capture.limit_stops import LimitStops, default_state_dir, ledger_key, open_ledger
from airflow_rbak.codec.layout import delivery_limit_stop_key
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.sealed import default_seal
from tests.cli.test_cli import rbak


def test_limit_stops_lists_both_places_with_a_forged_record_and_clear_deletes_both(tmp_path):
    # Given a location whose capture of prod/orders stopped at its limit, and whose record of prod/billing is forged
    location = (tmp_path / "backups").as_uri()
    stops = LimitStops(open_storage(location), open_ledger(default_state_dir()), default_seal())
    assert stops.record(QueueInfo("prod", "orders", "quorum", messages=5), 3, "nightly-1") == []
    stops.location.put(delivery_limit_stop_key("prod", "billing"), b'{"limit": 0}')

    # When rbak lists them, then clears orders
    listed = rbak("limit-stops", "--path", location, "--format", "json")
    text = rbak("limit-stops", "--path", location)
    cleared = rbak("limit-stops", "--path", location, "--clear", "--vhost", "prod", "--queue", "orders", "--format", "json")
    refused = rbak("limit-stops", "--path", location, "--clear", "--vhost", "prod")

    # Then every record is listed, the forged one as a stop, and the clear deleted orders' in both places only
    assert listed.returncode == 0, listed.stderr
    rows = sorted((r["where"], r["vhost"], r["queue"], r["limit"], r["problem"] is None) for r in json.loads(listed.stdout))
    assert rows == [("ledger", "prod", "orders", 3, True), ("location", "prod", "billing", None, False),
                    ("location", "prod", "orders", 3, True)]
    assert "prod/billing [location] fails its seal (no seal" in text.stdout and "counts as a stop" in text.stdout
    assert "prod/orders [ledger] stopped by nightly-1 at its delivery limit of 3" in text.stdout
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["cleared"] == [delivery_limit_stop_key("prod", "orders"),
                                                     ledger_key(stops.location.url, "prod", "orders")]
    assert [r.queue() for r in stops.all()] == [("prod", "billing")]
    assert refused.returncode == 2 and "--clear needs the stopped queue's --vhost and --queue" in refused.stderr
