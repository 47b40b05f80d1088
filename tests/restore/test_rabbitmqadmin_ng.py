"""Side by side with the RabbitMQ team's own tool: rabbitmqadmin v2 (Debian's rabbitmqadmin-ng, 2.29) and the
migration's transformations, on the same RabbitMQ 3.10 definitions, object by object.

The source is the migration tests' vhost (``tests/restore/migration_source.py``: a mirroring policy beside another
key, a queue declared with ``x-ha-mode``, a lazy policy, a priority queue, a dead-letter topology) and what else an
operator leaving mirroring may have: a policy of mirroring keys only, a mirroring policy that also reaches a
transient queue and a priority queue, a lazy queue by argument with overflow ``reject-publish-dlx``, a queue that
only a policy without mirroring keys matches, an internal exchange and an operator policy. ``rabbitmqadmin definitions export --transformations
prepare_for_quorum_queue_migration,strip_cmq_keys_from_policies,drop_empty_policies`` exports it; the restore's
own path (:func:`~airflow_rbak.restore.definitions.import_selection`, what the plan imports) transforms the export
a backup stores with ``convert_to_quorum``, ``strip_mirroring`` and ``drop_empty_policies`` for a RabbitMQ 4.3.6
target. Every field on which the two differ is in :data:`DIFFERENCES`, each with the row of the table
"Compared with rabbitmqadmin-ng's transformations" (docs/operations.md) that says why: the test fails if either side
changes. The tool comes from the cached Debian sid chroot (``scripts/rabbitmqadmin-ng.sh``); without it the test
is skipped with the reason, and fails under ``RBAK_CI=1``.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

from airflow_rbak.broker.definitions import without_credentials
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.restore import RestoreRequest
from airflow_rbak.restore.definitions import ImportSelection, import_selection
from tests.broker.conftest import Broker
from tests.broker.versions import unavailable
from tests.restore.migration_source import MIGRATION, set_up
from tests.restore.migration_source import path as _path

pytestmark = [pytest.mark.broker, pytest.mark.rabbitmq("3.10")]

TOOL = Path(__file__).resolve().parents[2] / "scripts" / "rabbitmqadmin-ng.sh"
#: The tool's version the table was written from.
TOOL_VERSION = "2.29.0"
#: Its three migration transformations; users and permissions (password hashes) are left out of the export.
THEIRS = "prepare_for_quorum_queue_migration,strip_cmq_keys_from_policies,drop_empty_policies,exclude_users,exclude_permissions"
#: The migration's target: the tool knows none, ours reads it from the target.
TARGET = "4.3.6"
#: What RabbitMQ's definitions import reads for a field an export leaves out (measured below on 3.10.8).
IMPORT_DEFAULTS = {"policy": {"apply-to": "all"}, "exchange": {"internal": False}}

#: The rows of the table in docs/operations.md, by their first column; each difference below names one.
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
ONLY_POLICY_MATCHED = "which queues become quorum"
PRIORITIES = "`x-max-priority` on a converted queue"
DURABLE = "a transient (non-durable) queue it converts"
QUEUE_MODE = "`queue-mode` in policies"
CLASSIC_ARGS = "classic-only arguments of a queue it leaves classic"
TOOL_WRITES_APPLY_TO = "a policy's `apply-to`"
INTERNAL = "an exchange's `internal` flag"
OPERATOR_POLICY = "operator policies"

#: (kind, name, field) -> (rabbitmqadmin-ng, airflow-rbak, row); "" field: the whole object (present/absent).
DIFFERENCES: dict[tuple[str, str, str], tuple[Any, Any, str]] = {
    ("policy", "mirrored", "apply-to"): ("all", "queues", TOOL_WRITES_APPLY_TO),
    ("policy", "mirror-more", "apply-to"): ("all", "queues", TOOL_WRITES_APPLY_TO),
    ("policy", "limits", "apply-to"): ("all", "queues", TOOL_WRITES_APPLY_TO),
    ("queue", "dead-letters", "type"): ("classic", "quorum", ONLY_POLICY_MATCHED),
    ("queue", "prio", "type"): ("classic", "quorum", ONLY_POLICY_MATCHED),
    ("queue", "prio", "arguments.x-max-priority"): (5, None, ONLY_POLICY_MATCHED),
    ("queue", "lazy-arg", "type"): ("classic", "quorum", ONLY_POLICY_MATCHED),
    ("queue", "lazy-arg", "arguments.x-queue-mode"): ("lazy", None, CLASSIC_ARGS),
    ("queue", "lazy-arg", "arguments.x-queue-master-locator"): ("min-masters", None, CLASSIC_ARGS),
    ("queue", "prio-m", "arguments.x-max-priority"): (10, None, PRIORITIES),
    ("queue", "scratch", "durable"): (False, True, DURABLE),
    ("policy", "lazy", ""): ("present", "absent", QUEUE_MODE),
    ("policy", "mirror-more", "definition.queue-mode"): ("lazy", None, QUEUE_MODE),
    ("exchange", "internal.x", "internal"): (False, True, INTERNAL),
    ("operator policy", "op", ""): ("present", "absent", OPERATOR_POLICY),
}


@pytest.fixture(scope="session")
def tool() -> str:
    """The tool's binary (provisioned once, in the sid chroot), or the test skipped / failed in CI with why."""
    if os.geteuid() != 0:
        unavailable("rabbitmqadmin-ng runs in the Debian sid chroot, which needs root")
    done = subprocess.run([str(TOOL), "provision"], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        why = " | ".join(line.strip() for line in done.stderr.strip().splitlines()[-3:])
        unavailable(f"no rabbitmqadmin-ng: {why[-800:]}")
    return done.stdout.strip()


def _admin(broker: Broker, *args: str, stdin: bytes | None = None) -> bytes:
    """``rabbitmqadmin ARGS`` against ``broker``'s management port; the credentials travel in its environment."""
    c = broker.connection
    env = {**os.environ, "RABBITMQADMIN_USERNAME": c.username, "RABBITMQADMIN_PASSWORD": c.password}
    done = subprocess.run([str(TOOL), "run", "--host", "127.0.0.1", "--port", str(c.management_port), *args],
                          input=stdin, capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def source(broker_310: Broker):
    """The source vhost on the 3.10 node: migration_source's objects and the ones the module docstring names."""
    vhost = f"adm-{uuid.uuid4().hex[:8]}"
    set_up(broker_310, vhost)
    api = broker_310.api
    api("PUT", _path("policies", vhost, "ha-only"), json={
        "pattern": "^audit$", "apply-to": "queues", "priority": 2, "definition": {"ha-mode": "exactly", "ha-params": 2}})
    api("PUT", _path("policies", vhost, "mirror-more"), json={
        "pattern": "^(scratch|prio-m)$", "apply-to": "queues",
        "definition": {"ha-mode": "all", "queue-mode": "lazy", "overflow": "reject-publish-dlx"}})
    for name, durable, arguments in (
            ("lazy-arg", True, {"x-queue-mode": "lazy", "x-queue-master-locator": "min-masters",
                                "x-overflow": "reject-publish-dlx", "x-max-length": 10}),
            ("scratch", False, {}), ("prio-m", True, {"x-max-priority": 10})):
        api("PUT", _path("queues", vhost, name), json={"durable": durable, "arguments": arguments})
    api("PUT", _path("queues", vhost, "limited"), json={"durable": True})
    api("PUT", _path("policies", vhost, "limits"), json={
        "pattern": "^limited$", "apply-to": "queues", "definition": {"max-length": 100}})
    api("PUT", _path("exchanges", vhost, "internal.x"), json={"type": "topic", "durable": True, "internal": True})
    api("POST", _path("bindings", vhost, "e", "internal.x", "q", "audit"), json={"routing_key": "#"})
    api("PUT", _path("operator-policies", vhost, "op"), json={
        "pattern": ".*", "apply-to": "queues", "definition": {"max-length": 5000}})
    yield vhost
    api("DELETE", _path("vhosts", vhost))


def _fields(kind: str, item: dict[str, Any]) -> dict[str, Any]:
    """An object's fields as a definitions import reads them, arguments and policy keys one by one."""
    if kind == "queue":
        arguments = dict(item.get("arguments") or {})
        out = {"type": arguments.pop("x-queue-type", "classic"), "durable": item.get("durable"),
               "auto_delete": item.get("auto_delete")}
        return out | {f"arguments.{k}": v for k, v in arguments.items()}
    if kind in ("policy", "operator policy"):
        out = {"pattern": item.get("pattern"), "priority": item.get("priority"), "apply-to": item.get("apply-to")}
        return out | {f"definition.{k}": v for k, v in (item.get("definition") or {}).items()}
    if kind == "exchange":
        out = {k: item.get(k) for k in ("type", "durable", "auto_delete", "internal")}
        return out | {f"arguments.{k}": v for k, v in (item.get("arguments") or {}).items()}
    return {"arguments": item.get("arguments") or {}}


def _objects(parts: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> fields, with what the import reads for a field left out."""
    out = {}
    for plural, kind in (("queues", "queue"), ("exchanges", "exchange"), ("bindings", "binding"),
                         ("policies", "policy"), ("operator_policies", "operator policy")):
        for item in parts.get(plural, []):
            name = (f"{item['source']} -> {item['destination_type']} {item['destination']} ({item['routing_key']})"
                    if kind == "binding" else item["name"])
            fields = _fields(kind, item)
            for field, default in IMPORT_DEFAULTS.get(kind, {}).items():
                fields[field] = default if fields[field] is None else fields[field]
            out[(kind, name)] = fields
    return out


def _theirs(broker: Broker, vhost: str) -> dict[str, list[dict[str, Any]]]:
    doc = orjson.loads(_admin(broker, "definitions", "export", "--transformations", THEIRS, "--stdout"))
    assert doc["users"] == [] and doc["permissions"] == []
    parts: dict[str, list[dict[str, Any]]] = {k: [i for i in doc.get(k) or [] if i.get("vhost") == vhost]
                                              for k in ("queues", "exchanges", "bindings", "policies")}
    parts["operator_policies"] = [{"name": p["name"], **p["value"]} for p in doc.get("parameters") or []
                                  if p.get("vhost") == vhost and p.get("component") == "operator_policy"]
    return parts


def _ours(broker: Broker, vhost: str) -> ImportSelection:
    """What a restore of this vhost's definitions with the migration's transformations plans for ``TARGET``."""
    saved = orjson.loads(without_credentials(ManagementClient(broker.connection).definitions_raw()))  # as backed up
    settings = RestoreRequest(storage_url="file:///unused", backup_id="adm", vhosts=[vhost], restore_definitions=True,
                              transformations=MIGRATION)
    chosen = import_selection(saved, settings.definitions_of((vhost,)), settings, TARGET)
    assert chosen.compatibility == [] and chosen.migration is not None and chosen.migration["refused"] == []
    return chosen


def _differences(theirs: dict, ours: dict) -> dict[tuple[str, str, str], tuple[Any, Any]]:
    found: dict[tuple[str, str, str], tuple[Any, Any]] = {}
    for key in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(key), ours.get(key)
        if a is None or b is None:
            found[(*key, "")] = ("absent" if a is None else "present", "absent" if b is None else "present")
            continue
        for field in sorted(set(a) | set(b)):
            if a.get(field) != b.get(field):
                found[(*key, field)] = (a.get(field), b.get(field))
    return found


def test_every_difference_is_a_row_of_the_table_in_the_docs():
    text = DOCS.read_text()
    table = text[text.index("### Compared with rabbitmqadmin-ng's transformations"):]
    table = table[:table.index("\n\n", table.index("| object / field |"))]
    rows = [line.split(" | ")[0].removeprefix("| ") for line in table.splitlines() if line.startswith("| ")][1:]

    assert sorted(rows) == sorted({row for _, _, row in DIFFERENCES.values()})


def test_the_tools_transformations_and_ours_differ_only_where_the_table_says(tool, broker_310, source):
    assert Path(tool).name == "rabbitmqadmin"
    version = subprocess.run([str(TOOL), "version"], capture_output=True, text=True, check=True).stdout.strip()
    assert version == TOOL_VERSION, f"rabbitmqadmin-ng {version}: compare it again and update DIFFERENCES and the docs"
    theirs, chosen = _objects(_theirs(broker_310, source)), _ours(broker_310, source)
    ours = _objects(chosen.selected[source])

    found = _differences(theirs, ours)

    assert found == {key: (a, b) for key, (a, b, _) in DIFFERENCES.items()}
    # Everything else is the same on both sides: the bindings and exchanges (so the dead-letter topology), the
    # policies left without keys (dropped by both), the mirroring keys (removed by both), overflow.
    assert sum(kind == "binding" for kind, _ in ours) == 5
    # The tool converts a queue that any policy matches, one without mirroring keys too; and replaces overflow
    # reject-publish-dlx on a queue it leaves classic, which could dead-letter rejected publishes (ours converts it).
    assert theirs[("queue", "limited")]["type"] == ours[("queue", "limited")]["type"] == "quorum"
    assert theirs[("queue", "lazy-arg")]["type"] == "classic"
    assert theirs[("queue", "lazy-arg")]["arguments.x-overflow"] == ours[("queue", "lazy-arg")]["arguments.x-overflow"] \
        == "reject-publish"
    assert ("policy", "ha-only") not in theirs and ("policy", "ha-only") not in ours
    # Every difference on our side is in the plan: a change the transformations list, or a parameter not imported.
    listed = {(c["kind"], c["name"]) for c in chosen.migration["changes"]}
    listed |= {(p["kind"].replace("_", " "), p["name"]) for p in chosen.not_imported}
    ours_differ = {(kind, name) for (kind, name, _), (_, _, row) in DIFFERENCES.items()
                   if row not in (TOOL_WRITES_APPLY_TO, INTERNAL)}
    assert ours_differ <= listed
    assert chosen.not_imported == [{"kind": "operator_policy", "vhost": source, "name": "op"}]


def test_what_the_tools_export_gives_a_broker(tool, broker_310, source):
    """Measured on the 3.10 node, in a scratch vhost: the two fields its export leaves out, read back after its own
    import, and the two quorum queues it writes that RabbitMQ 3.10 refuses to declare (non-durable, x-max-priority)."""
    doc = orjson.loads(_admin(broker_310, "definitions", "export", "--transformations", THEIRS, "--stdout"))
    scratch = f"adm-i-{uuid.uuid4().hex[:8]}"
    broker_310.api("PUT", _path("vhosts", scratch))
    try:
        moved = {"policies": [{**p, "vhost": scratch} for p in doc["policies"] if p["vhost"] == source and p["name"] == "mirrored"],
                 "exchanges": [{**e, "vhost": scratch} for e in doc["exchanges"]
                               if e["vhost"] == source and e["name"] == "internal.x"]}
        assert moved["policies"][0]["apply_to"] == "queues" and "apply-to" not in moved["policies"][0]
        _admin(broker_310, "definitions", "import", "--stdin", stdin=orjson.dumps(moved))
        policy = broker_310.api("GET", _path("policies", scratch, "mirrored")).json()
        exchange = broker_310.api("GET", _path("exchanges", scratch, "internal.x")).json()
        assert (policy["apply-to"], exchange["internal"]) == ("all", False)
        for queue in (q for q in doc["queues"] if q["vhost"] == source and q["name"] in ("scratch", "prio-m")):
            assert queue["arguments"]["x-queue-type"] == "quorum"
            with pytest.raises(requests.HTTPError) as refused:
                broker_310.api("PUT", _path("queues", scratch, queue["name"]),
                               json={k: queue[k] for k in ("durable", "auto_delete", "arguments")})
            assert refused.value.response.status_code == 400
    finally:
        broker_310.api("DELETE", _path("vhosts", scratch))
