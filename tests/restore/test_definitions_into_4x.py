"""What RabbitMQ 4.0 and 4.3 do with the objects of a 3.10 definitions export that 4.x changed, imported as they are.

These tests hold the broker to the facts the restore's import relies on and docs/operations.md states
("From RabbitMQ 3.10 to 4.x"); they fail if a broker release behaves otherwise. Measured on 4.0.5 and 4.3.6 (3.10
takes every one of these objects: the plan adapts nothing there, tests/restore/test_target_compatibility.py): one object the
broker refuses fails the import of its vhost with a 400, and the objects beside it may or may not have been
imported by then (queues are declared concurrently: a half-done import). So such objects are changed or refused in
the plan (``restore/target_compatibility.py``), never met half-way.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
import requests

pytestmark = [pytest.mark.broker, pytest.mark.rabbitmq("4.0", "4.3")]


def import_into(broker, vhost: str, document: dict) -> requests.Response:
    c = broker.connection
    return requests.post(f"{c.management_base_url}/api/definitions/{quote(vhost, safe='')}", json=document,
                         auth=(c.username, c.password), timeout=30)


def queue(name: str, durable: bool = True, **arguments) -> dict:
    return {"name": name, "durable": durable, "auto_delete": False, "arguments": arguments}


def test_a_transient_non_exclusive_queue_is_still_imported(broker, vhost):
    assert import_into(broker, vhost, {"queues": [queue("transient", durable=False)]}).status_code == 204
    assert broker.api("GET", f"queues/{vhost}/transient").json()["durable"] is False


def test_x_queue_mode_lazy_is_kept_as_an_argument_and_means_nothing(broker, vhost):
    assert import_into(broker, vhost, {"queues": [queue("lazy", **{"x-queue-mode": "lazy"})]}).status_code == 204
    assert broker.api("GET", f"queues/{vhost}/lazy").json()["arguments"]["x-queue-mode"] == "lazy"


def test_x_queue_version_1_fails_the_whole_import_on_4_3_and_is_ignored_on_4_0(broker, behaviour, vhost):
    done = import_into(broker, vhost, {"queues": [queue("v1", **{"x-queue-version": 1}), queue("other")]})
    if behaviour.refuses_queue_version_1():
        assert done.status_code == 400 and "unsupported queue version" in done.text
        assert "v1" not in {q["name"] for q in broker.api("GET", f"queues/{vhost}").json()}
    else:  # 4.0: classic queues are all version 2; the argument is kept and means nothing
        assert done.status_code == 204
        assert broker.api("GET", f"queues/{vhost}/v1").json()["arguments"] == behaviour.declared_arguments(
            {"x-queue-version": 1})


def test_a_mirroring_policy_fails_the_whole_import_and_a_queue_mode_policy_is_accepted(broker, vhost):
    mirroring = {"name": "ha", "pattern": ".*", "apply-to": "queues", "priority": 0,
                 "definition": {"ha-mode": "all", "ha-sync-mode": "automatic"}}
    lazy = {"name": "lazy", "pattern": "^l", "apply-to": "queues", "priority": 1, "definition": {"queue-mode": "lazy"}}
    refused = import_into(broker, vhost, {"policies": [mirroring], "queues": [queue("q")]})
    assert refused.status_code == 400 and "are not recognised policy settings" in refused.text
    assert broker.api("GET", f"policies/{vhost}").json() == []
    assert import_into(broker, vhost, {"policies": [lazy]}).status_code == 204
    assert [p["name"] for p in broker.api("GET", f"policies/{vhost}").json()] == ["lazy"]
