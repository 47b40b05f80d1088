"""TLS end to end on a real broker: AMQPS, HTTPS management and the stream protocol over TLS.

A second private node (``scripts/rabbitmq.sh`` with ``RBAK_TLS_DIR``) listens with a
certificate for ``localhost`` signed by a CA this suite makes (``trustme``). Its ports
come from ``RBAK_TLS_*`` environment variables, with defaults away from the default
node's. The client reaches it only through the TLS listeners: a capture, a definitions
export, a restore with definitions, and the stream protocol's offset calls. A CA that
did not sign the certificate, and a host name the certificate does not name, are
refused with :class:`BrokerTlsError` saying which; ``tls`` with an ``http://``
management URL is refused at construction.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import requests
import trustme

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker import stream_protocol
from airflow_rbak.broker.amqp_client import open_connection
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueSelector
from airflow_rbak.broker.errors import BrokerTlsError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.restore import RestoreRequest, RestoreRun
from tests.restore.helpers import body_of, declare, publish, read_queue

pytestmark = pytest.mark.broker
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "rabbitmq.sh"


def _port(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


PLAIN = {"RBAK_AMQP_PORT": _port("RBAK_TLS_NODE_AMQP_PORT", 5682), "RBAK_MGMT_PORT": _port("RBAK_TLS_NODE_MGMT_PORT", 15682),
         "RBAK_STREAM_PORT": _port("RBAK_TLS_NODE_STREAM_PORT", 5562)}
TLS_PORTS = {"RBAK_AMQPS_PORT": _port("RBAK_AMQPS_PORT", PLAIN["RBAK_AMQP_PORT"] + 1),
             "RBAK_MGMT_TLS_PORT": _port("RBAK_MGMT_TLS_PORT", PLAIN["RBAK_MGMT_PORT"] + 1),
             "RBAK_STREAM_TLS_PORT": _port("RBAK_STREAM_TLS_PORT", PLAIN["RBAK_STREAM_PORT"] + 1)}


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory) -> Iterator[tuple[RabbitMQConnection, Path, Path]]:
    """Start the TLS node; yield a TLS connection to ``localhost``, the CA's file and another CA's file."""
    if shutil.which("rabbitmq-server") is None or os.geteuid() != 0:
        pytest.skip("broker tests need rabbitmq-server and root (see scripts/rabbitmq.sh)")
    certs = tmp_path_factory.mktemp("tls")
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("localhost")  # the name only: 127.0.0.1 is a host name mismatch
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    other.cert_pem.write_to_path(str(certs / "other-ca.pem"))
    (certs / "server.pem").write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(certs / "server.key"))
    env = {**os.environ, **{k: str(v) for k, v in {**PLAIN, **TLS_PORTS}.items()}, "RBAK_TLS_DIR": str(certs),
           "RBAK_RABBIT_NODE": os.environ.get("RBAK_TLS_RABBIT_NODE", "rabbit-tls@localhost"),
           "RBAK_RABBIT_DIR": os.environ.get("RBAK_TLS_RABBIT_DIR", str(REPO / ".run" / "rabbitmq-tls"))}
    subprocess.run([str(SCRIPT), "start"], check=True, capture_output=True, env=env, timeout=180)
    connection = RabbitMQConnection(host="localhost", amqp_port=TLS_PORTS["RBAK_AMQPS_PORT"], tls=True,
                                    management_port=TLS_PORTS["RBAK_MGMT_TLS_PORT"],
                                    stream_port=TLS_PORTS["RBAK_STREAM_TLS_PORT"], ca_file=str(certs / "ca.pem"))
    try:
        yield connection, certs / "ca.pem", certs / "other-ca.pem"
    finally:
        subprocess.run([str(SCRIPT), "stop", "--purge"], capture_output=True, env=env, timeout=180)


@pytest.fixture
def tls_vhost(tls_broker) -> Iterator[str]:
    connection, ca, _ = tls_broker
    name = f"tls-{uuid.uuid4().hex[:8]}"
    api = f"{connection.management_base_url}/api"
    auth = (connection.username, connection.password)
    requests.put(f"{api}/vhosts/{name}", auth=auth, verify=str(ca), timeout=30).raise_for_status()
    requests.put(f"{api}/permissions/{name}/{connection.username}", auth=auth, verify=str(ca), timeout=30,
                 json={"configure": ".*", "write": ".*", "read": ".*"}).raise_for_status()
    yield name
    requests.delete(f"{api}/vhosts/{name}", auth=auth, verify=str(ca), timeout=30)


def test_capture_definitions_restore_and_stream_protocol_all_run_over_tls(tls_broker, tls_vhost, tmp_path):
    # Given a TLS-only connection (AMQPS, HTTPS management, stream over TLS) and queues of each kind
    connection, _, _ = tls_broker
    assert connection.management_base_url.startswith("https://")
    declare(connection, tls_vhost, {"orders": "quorum", "events": "stream"})
    publish(connection, tls_vhost, "orders", 0, 200)
    publish(connection, tls_vhost, "events", 0, 50, decimal=False)  # a decimal header closes a stream connection
    stream_protocol.store_consumer_offset(connection, tls_vhost, "events", "billing", 41)
    location = (tmp_path / "b").as_uri()

    # When it backs up (capture and definitions export) and restores with definitions into new queues
    manifest = BackupRun(connection, BackupSettings("tls-1", location, selector=QueueSelector(vhosts=(tls_vhost,)))).run()
    report = RestoreRun(connection, RestoreRequest(
        location, backup_id="tls-1", queue_map={"orders": "orders-back", "events": "events-back"},
        restore_definitions=True, checkpoint_state=str(tmp_path / "r.db"))).run()

    # Then every message is backed up and restored, and the stream protocol answered over TLS
    counts = {q.name: q.message_count for q in manifest.queues}
    assert counts == {"orders": 200, "events": 50} and manifest.definitions.queue_count >= 2
    assert report.published == 250
    assert [m[0] for m in read_queue(connection, tls_vhost, "orders-back", "quorum", 200)] == [body_of(i, 300) for i in range(200)]
    assert len(read_queue(connection, tls_vhost, "events-back", "stream", 50)) == 50
    assert stream_protocol.stream_tail(connection, tls_vhost, "events") == 49
    assert stream_protocol.query_consumer_offsets(connection, tls_vhost, "events", ["billing"]) == {"billing": 41}
    # and the broker saw only TLS connections from us
    with ManagementClient(connection) as client:
        assert all(c.get("ssl") for c in client.get("connections") if c.get("vhost") == tls_vhost)


@pytest.mark.parametrize("mistake", ["wrong CA", "host name mismatch"])
def test_a_wrong_ca_or_host_name_is_refused_clearly_on_every_protocol(tls_broker, tls_vhost, mistake):
    # Given a connection that trusts another CA, or names the broker by an address its certificate does not
    connection, _, other_ca = tls_broker
    wrong = (replace(connection, ca_file=str(other_ca)) if mistake == "wrong CA"
             else replace(connection, host="127.0.0.1"))
    expected = "set ca_file" if mistake == "wrong CA" else "host name the certificate names"
    # When each protocol connects, then each refuses with a TLS error saying what to fix
    attempts = {
        "amqp": lambda: open_connection(wrong, tls_vhost),
        "management": lambda: ManagementClient(wrong).version(),
        "stream": lambda: stream_protocol.stream_tail(wrong, tls_vhost, "none"),
    }
    for name, attempt in attempts.items():
        with pytest.raises(BrokerTlsError, match=expected) as caught:
            attempt()
        assert "TLS certificate" in str(caught.value), name
        print(f"{mistake}, {name}: {caught.value}")


def test_tls_with_an_http_management_url_is_refused_at_construction():
    with pytest.raises(ConfigurationError, match="tls is on but management_url is http://"):
        RabbitMQConnection(tls=True, management_url="http://mq.example:15672")
    with pytest.raises(ConfigurationError, match="management_url is http://"):
        RabbitMQConnection.from_url("amqps://u:p@mq.example/?management_url=http://mq.example:15672")
    assert RabbitMQConnection(tls=True, management_url="https://mq.example").management_base_url == "https://mq.example"
