"""Fixtures of the DAG tests: one migrated Airflow home per session, and the shared broker."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker.conftest import behaviour, broker, broker_310, second_broker, vhost  # noqa: F401 - fixtures, imported to register them here
from tests.dags.airflow_env import VENV_BIN, airflow_env, run
from tests.reliability.secrets import secret_user  # noqa: F401 - a fixture, imported to register it here


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An AIRFLOW_HOME with a migrated SQLite database (``airflow db migrate`` once, about 5 s)."""
    home = tmp_path_factory.mktemp("airflow-home")
    done = run([str(VENV_BIN / "airflow"), "db", "migrate"], airflow_env(home), timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return home


class StatsdListener:
    """A UDP socket on a free loopback port that Airflow's StatsD client sends to.

    Read after the DAG run has ended: loopback UDP puts each datagram into the socket's buffer as it is sent,
    so draining it then finds everything (no thread, no waiting). Only ``rbak*`` metrics are allowed through,
    which keeps them few enough for the buffer. Tags are on, as docs/airflow.md#metrics tells users to set them
    for plain StatsD (InfluxDB style: ``name,tag=value:1|c``).
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]

    def env(self) -> dict[str, str]:
        """The Airflow settings that send metrics here."""
        return {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
                "AIRFLOW__METRICS__STATSD_PORT": str(self.port), "AIRFLOW__METRICS__METRICS_ALLOW_LIST": "rbak",
                "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True"}

    def received(self) -> dict[str, list[tuple[float, str, dict[str, str]]]]:
        """Every metric received so far: name (with Airflow's prefix) -> [(value, type, tags)] in arrival order."""
        found: dict[str, list[tuple[float, str, dict[str, str]]]] = {}
        while True:
            try:
                data = self.sock.recv(65536).decode()
            except BlockingIOError:
                return found
            for line in data.splitlines():
                name_and_tags, _, rest = line.rpartition(":")  # a tag value may hold no ':', a name neither
                name, *tags = name_and_tags.split(",")
                value, _, kind = rest.partition("|")
                found.setdefault(name, []).append((float(value), kind.split("|")[0], dict(t.split("=", 1) for t in tags)))


def documented(received: dict[str, list[tuple[float, str, dict[str, str]]]]) -> dict[tuple[str, ...], tuple[float, str]]:
    """The received rbak metrics, each checked against the documented table (name, StatsD type, tag names), keyed by
    (name without Airflow's prefix, tag values in the table's order)."""
    from airflow_rbak.operators.metrics import METRICS

    types = {"counter": "c", "gauge": "g", "timer (ms)": "ms"}
    found = {}
    for full, samples in received.items():
        if not full.startswith("airflow.rbak."):
            continue  # Airflow's own (the allow list matches a DAG id holding "rbak" too)
        name = full.removeprefix("airflow.")
        assert name in METRICS, f"{full} is not in the documented metrics"
        kind, tags, _ = METRICS[name]
        for value, sent_as, sent_tags in samples:
            assert (sent_as, list(sent_tags)) == (types[kind], list(tags)), (full, sent_as, sent_tags)
            key = (name, *(sent_tags[t] for t in tags))
            assert key not in found, f"{key} sent twice"
            found[key] = (value, sent_as)
    return found


@pytest.fixture
def statsd() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    yield listener
    listener.sock.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs real spark-submit jobs (about 10 s of JVM start-up each)")
