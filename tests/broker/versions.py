"""Which RabbitMQ the session's broker fixtures run, and what they ran.

A pytest session runs against one RabbitMQ series, named by ``RBAK_RABBITMQ_VERSION`` (3.10, the default, is the
host's package; 4.0 and 4.3 run in chroots that ``scripts/rabbitmq.sh`` builds once). A test whose expectation
belongs to some series only says so with ``@pytest.mark.rabbitmq("4.3", ...)`` and is skipped, with the reason, in a
session of another series; an unmarked test holds on every series. So ``scripts/test.sh`` runs a folder on a series
by running it in a session of that series: one node per part, never one per version.

A node of the series that cannot be provisioned (no root, no debootstrap, no mirror) skips the broker tests with
the reason, except under ``RBAK_CI=1`` (or ``CI``), where it fails the run: CI must say what it did not test.
"""

from __future__ import annotations

import os

import pytest

SERIES = ("3.10", "4.0", "4.3")

#: node name -> exact RabbitMQ version of each node the session's fixtures started or reused (the report prints it).
NODES: dict[str, str] = {}


def session_series() -> str:
    """The RabbitMQ series this session runs (``RBAK_RABBITMQ_VERSION``, default 3.10)."""
    series = os.environ.get("RBAK_RABBITMQ_VERSION", "3.10")
    if series not in SERIES:
        raise pytest.UsageError(f"RBAK_RABBITMQ_VERSION={series} is not one of {', '.join(SERIES)}")
    return series


def in_ci() -> bool:
    return bool(os.environ.get("RBAK_CI") or os.environ.get("CI"))


def unavailable(reason: str) -> None:
    """A broker the session needs cannot be had: fail under CI, skip otherwise, with the reason either way."""
    if in_ci():
        pytest.fail(f"{reason} (RBAK_CI: the RabbitMQ {session_series()} tests must run)", pytrace=False)
    pytest.skip(reason)


def skip_unless_series(item: pytest.Item) -> None:
    """Skip a test marked ``rabbitmq(...)`` in a session of a series it does not name."""
    marker = item.get_closest_marker("rabbitmq")
    if marker is None:
        return
    wanted = tuple(str(v) for v in marker.args)
    unknown = [v for v in wanted if v not in SERIES]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: rabbitmq marker names {unknown}, not one of {', '.join(SERIES)}")
    if session_series() not in wanted:
        pytest.skip(f"expects RabbitMQ {' or '.join(wanted)}; this session runs {session_series()} "
                    f"(RBAK_RABBITMQ_VERSION)")


def report_lines() -> list[str]:
    """``rabbitmq: 4.3.6 (rabbit-x@localhost)`` for each node the session used."""
    return [f"rabbitmq: {version} ({node})" for node, version in sorted(NODES.items())]
