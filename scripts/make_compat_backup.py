"""Write the compatibility backup that tests/compat/test_compat_backup.py holds every later version to.

Run once, with today's code, against a real broker (RabbitMQ 3.10 or later, management and stream plugins on):

    RBAK_BROKER_URL='amqp://guest:guest@localhost:5672/?management_port=15672&stream_port=5552' \\
        python scripts/make_compat_backup.py tests/compat/backups/v1

It declares a vhost ``rbak-compat`` with a classic, a quorum and a stream queue and an exchange bound to the classic
one, publishes tests/compat/messages.py's messages, and takes two backups into ``OUT/location`` as rbak_backup
takes them: ``compat-full``, then (after more stream messages) ``compat-incremental``, whose stream continues the
first's segments. ``OUT/expected.json`` lists what each backup must restore, from what was published (not from
the backup). Commit both; never regenerate a released version's folder (a new format version gets a new folder).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from urllib.parse import quote

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_rbak import __version__  # noqa: E402
from airflow_rbak.backup.run import BackupRun, BackupSettings  # noqa: E402
from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402
from airflow_rbak.broker.discovery import QueueSelector  # noqa: E402
from airflow_rbak.broker.pika_connection import blocking_connection  # noqa: E402
from tests.compat.messages import FIRST, FULL, INCREMENTAL, QUEUES, SECOND, SOURCE_VHOST, body, properties, published_json  # noqa: E402

EXCHANGE, ROUTING_KEY = "compat.orders", "order.created"


def api(c: RabbitMQConnection, method: str, path: str, **kwargs: object) -> requests.Response:
    response = requests.request(method, f"{c.management_base_url}/api/{path}", auth=(c.username, c.password),
                                timeout=30, **kwargs)
    response.raise_for_status()
    return response


def fresh_vhost(c: RabbitMQConnection) -> None:
    """The source vhost, emptied: deleted if there, created, the connection's user allowed everything in it."""
    name = quote(SOURCE_VHOST, safe="")
    if requests.get(f"{c.management_base_url}/api/vhosts/{name}", auth=(c.username, c.password), timeout=30).ok:
        api(c, "DELETE", f"vhosts/{name}")
    api(c, "PUT", f"vhosts/{name}")
    api(c, "PUT", f"permissions/{name}/{quote(c.username, safe='')}", json={"configure": ".*", "write": ".*", "read": ".*"})


def publish(c: RabbitMQConnection, queue: str, start: int, count: int) -> None:
    with blocking_connection(c.pika_parameters(SOURCE_VHOST)) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        for i in range(start, start + count):
            channel.basic_publish("", queue, body(queue, i), properties(queue, i), mandatory=True)


def backup(c: RabbitMQConnection, location: str, backup_id: str) -> None:
    # allow_delivery_count_increase: RabbitMQ 4.0-4.2 would leave the quorum queue out otherwise
    settings = BackupSettings(backup_id, location, selector=QueueSelector(vhosts=(SOURCE_VHOST,)),
                              segment_max_bytes=2048, allow_delivery_count_increase=True)
    manifest = BackupRun(c, settings).run()
    print(f"{backup_id}: {manifest.total_messages} messages in {manifest.total_segments} segments")


def main(out: Path) -> None:
    c = RabbitMQConnection.from_url(os.environ["RBAK_BROKER_URL"])
    if out.exists():
        shutil.rmtree(out)
    (out / "location").mkdir(parents=True)
    location = (out / "location").resolve().as_uri()
    fresh_vhost(c)
    with blocking_connection(c.pika_parameters(SOURCE_VHOST)) as conn:
        channel = conn.channel()
        for name, queue_type in QUEUES.items():
            channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
        channel.exchange_declare(EXCHANGE, "topic", durable=True)
        channel.queue_bind("orders", EXCHANGE, ROUTING_KEY)
    for queue, count in FIRST.items():
        publish(c, queue, 0, count)
    backup(c, location, FULL)
    for queue, count in SECOND.items():
        publish(c, queue, FIRST[queue], count)
    backup(c, location, INCREMENTAL)
    broker_version = api(c, "GET", "overview").json()["rabbitmq_version"]
    api(c, "DELETE", f"vhosts/{quote(SOURCE_VHOST, safe='')}")

    expected = {
        "written_by": {"airflow_rbak": __version__, "rabbitmq": broker_version},
        "source_vhost": SOURCE_VHOST,
        "definitions": {"queues": QUEUES, "exchanges": {EXCHANGE: "topic"},
                        "bindings": [[EXCHANGE, "orders", ROUTING_KEY]]},
        # each backup restores the first N messages of each queue, in order
        "backups": {FULL: {"depends_on": [], "messages": FIRST},
                    INCREMENTAL: {"depends_on": [FULL], "messages": {q: FIRST[q] + SECOND.get(q, 0) for q in QUEUES}}},
        "messages": {q: [published_json(q, i) for i in range(FIRST[q] + SECOND.get(q, 0))] for q in QUEUES},
    }
    (out / "expected.json").write_text(one_message_a_line(expected))


def one_message_a_line(expected: dict) -> str:
    """The expected JSON, readable in a diff: indented, each message on one line."""
    text = json.dumps({**expected, "messages": "MESSAGES"}, indent=1, ensure_ascii=False)
    queues = ",\n".join(f'  {json.dumps(q)}: [\n' + ",\n".join(f"   {json.dumps(m, ensure_ascii=False)}" for m in ms) + "\n  ]"
                        for q, ms in expected["messages"].items())
    return text.replace('"MESSAGES"', "{\n" + queues + "\n }") + "\n"


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/compat/backups/v1"))
