"""The management client of a connection listing several nodes, against loopback HTTP servers standing in for them:
a read goes to the next node whatever stopped it; a write only when the node never received it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from airflow_rbak.broker.connection import BrokerAddress, RabbitMQConnection
from airflow_rbak.broker.errors import BrokerUnreachableError
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.broker.management_admin import send

SECRET = "mgmt-s3cret"


@contextmanager
def answering_node(name: str) -> Iterator[tuple[int, list[str]]]:
    """A node whose management API answers every request with its name; yields its port and the requests it got."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(f"{self.command} {self.path}")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.dumps({"node": name, "rabbitmq_version": "3.10.8"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (connects are refused)."""
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def silent_node() -> Iterator[int]:
    """A node that takes the connection and never answers (a request sent to it may have been applied)."""
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def cluster(*ports: int) -> RabbitMQConnection:
    first, *rest = ports
    return RabbitMQConnection(management_port=first, password=SECRET,
                              more_nodes=tuple(BrokerAddress("127.0.0.1", 5672 + i, port) for i, port in enumerate(rest, 1)))


def test_a_read_refused_by_the_first_node_is_answered_by_the_next_which_then_serves_the_client():
    with answering_node("rabbit@two") as (port, seen), ManagementClient(cluster(closed_port(), port)) as client:
        assert client.overview()["node"] == "rabbit@two"
        assert client.version() == "3.10.8"
        assert client.base_url == f"http://127.0.0.1:{port}"
        assert seen == ["GET /api/overview", "GET /api/overview"]


def test_a_write_whose_node_may_have_received_it_is_not_sent_to_another():
    with silent_node() as silent, answering_node("rabbit@two") as (port, seen):
        with ManagementClient(cluster(silent, port)) as client, pytest.raises(requests.ReadTimeout):
            client.send("POST", "definitions/v", json={"queues": []}, timeout=0.5)
        assert seen == []  # never replayed on node 2


def test_a_write_refused_by_the_first_node_goes_to_the_next():
    with answering_node("rabbit@two") as (port, seen), ManagementClient(cluster(closed_port(), port)) as client:
        send(client, "POST", "definitions/v", {"queues": []})
        assert seen == ["POST /api/definitions/v"]


def test_no_node_answering_names_every_node_tried_and_no_secret():
    with ManagementClient(cluster(closed_port(), closed_port())) as client, pytest.raises(BrokerUnreachableError) as failed:
        client.overview()
    assert str(failed.value).count("http://127.0.0.1:") == 2 and SECRET not in str(failed.value)
