"""A small client of the RabbitMQ Management HTTP API.

Only what backup needs: version, vhosts, queues (with type, arguments and
effective policy), policies and definitions. Errors name the endpoint and
never the credentials.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests
from urllib3.exceptions import NewConnectionError

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import BrokerApiError, BrokerAuthError, BrokerUnreachableError, QueueNotFoundError, tls_failure

#: Names RabbitMQ's HTTP server cannot address: it removes ``.`` and ``..`` path segments, even
#: percent-encoded (measured on 3.10.8: a 301 to the parent path).
UNADDRESSABLE = frozenset({".", ".."})


def addressable(name: str) -> bool:
    """Whether a vhost or queue name can be a path segment of a Management API URL."""
    return name not in UNADDRESSABLE


def reason_of(response: requests.Response, limit: int = 300) -> str:
    """The ``reason`` of an error answer (a user may see it: bounded), or its text."""
    try:
        reason = str(response.json().get("reason", ""))
    except (ValueError, AttributeError):
        reason = response.text
    return reason[:limit] or "no reason given"


def _q(name: str) -> str:
    if not addressable(name):
        raise BrokerApiError(f"the management API cannot address the name {name!r} in a URL")
    return quote(name, safe="")


def _not_sent(exc: requests.RequestException) -> bool:
    """Whether a request failed before the node could have received it (refused, or no connection in time): only
    then may it go to another node, since a write that timed out may have been applied."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(exc, requests.ConnectionError) and isinstance(reason, NewConnectionError)


class ManagementClient:
    """Talks to ``/api`` of one node, the first of the connection's nodes that answers; one HTTP session per client.

    A request that cannot reach the node goes to the next one (``RabbitMQConnection.nodes``), which then serves the
    client's later requests: every node of a cluster answers for the whole cluster."""

    def __init__(self, connection: RabbitMQConnection) -> None:
        self.connection = connection
        self._bases = connection.management_base_urls
        self._current = 0
        self._session = requests.Session()
        self._session.auth = (connection.username, connection.password)
        # Passed with every request, not set on the session: requests lets REQUESTS_CA_BUNDLE (set system-wide
        # on many hosts) override a session's verify, which would ignore ca_file and refuse the broker.
        self._verify: bool | str = (connection.ca_file or connection.tls_verify) if connection.tls else True
        if connection.tls and connection.cert_file:
            # one file holding the certificate and its key, or the two files
            key_file = connection.key_file
            self._session.cert = connection.cert_file if key_file is None else (connection.cert_file, key_file)

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        """One HTTP request on this client's session, verified against the connection's CA."""
        return self._session.request(method, url, verify=self._verify, **kwargs)

    @property
    def base_url(self) -> str:
        """The management API base URL of the node this client talks to now."""
        return self._bases[self._current]

    def send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """``method /api/{path}`` on the current node, else on the next node that can be reached; raises the last
        node's error when none can be (a GET on any error of the connection, a write only when it was not sent)."""
        for attempt in range(len(self._bases)):
            index = (self._current + attempt) % len(self._bases)
            try:
                response = self.request(method, f"{self._bases[index]}/api/{path}", **kwargs)
            except requests.RequestException as exc:
                retry = isinstance(exc, requests.ConnectionError | requests.Timeout) if method == "GET" else _not_sent(exc)
                if attempt + 1 == len(self._bases) or not retry:
                    raise
                continue
            self._current = index
            return response
        raise AssertionError("unreachable: the connection has at least one node")

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> ManagementClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        """GET ``/api/{path}`` and return the parsed JSON; typed errors for unreachable, 401 and others."""
        try:
            response = self.send("GET", path, params=params, timeout=self.connection.timeout)
        except requests.RequestException as exc:
            where = " or ".join(self._bases)
            raise tls_failure(exc, where) or BrokerUnreachableError(
                f"management API at {where} is unreachable "
                f"({type(exc).__name__}); check management_port/management_url and that the "
                "rabbitmq_management plugin is enabled"
            ) from None
        if response.status_code == 401:
            raise self._refused(path, response)
        if response.status_code == 404:
            raise BrokerApiError(f"management API: /api/{path} not found (HTTP 404)", 404)
        if response.status_code >= 400:
            raise BrokerApiError(f"management API: GET /api/{path} failed with HTTP {response.status_code}", response.status_code)
        try:
            return response.json()
        except ValueError:
            raise BrokerApiError(f"management API: /api/{path} did not return JSON") from None

    def _refused(self, path: str, response: requests.Response) -> BrokerAuthError:
        return BrokerAuthError(
            f"management API refused user {self.connection.username!r} on /api/{path} (HTTP 401: "
            f"{reason_of(response, 120)}); check the password, that the user has a tag that opens the management "
            "API ('management', 'monitoring', 'policymaker' or 'administrator') and its permissions")

    def get_text(self, path: str) -> bytes:
        """GET ``/api/{path}`` and return the raw body (definitions are saved byte for byte)."""
        try:
            response = self.send("GET", path, timeout=max(self.connection.timeout, 60))
        except requests.RequestException as exc:
            raise tls_failure(exc, " or ".join(self._bases)) or BrokerUnreachableError(
                f"management API unreachable while reading /api/{path} ({type(exc).__name__})"
            ) from None
        if response.status_code == 401:
            raise self._refused(path, response)
        if response.status_code >= 400:
            raise BrokerApiError(f"management API: GET /api/{path} failed with HTTP {response.status_code}", response.status_code)
        return response.content

    def overview(self) -> dict[str, Any]:
        return self.get("overview")

    def version(self) -> str:
        """The broker's version, e.g. ``3.10.8``."""
        return str(self.overview()["rabbitmq_version"])

    def cluster_name(self) -> str | None:
        return self.overview().get("cluster_name")

    def cluster_identity(self) -> str:
        """What tells this cluster from any other: the random ``internal_cluster_id`` RabbitMQ (3.8+) keeps once per
        cluster, else (a user without the rights to read it) the cluster name and the answering node's name.

        The cluster name alone is not enough: it is user-set, and two clusters may share it.
        """
        try:
            value = self.get("global-parameters/internal_cluster_id").get("value")
            if isinstance(value, str) and value:
                return value
        except (BrokerApiError, BrokerAuthError, AttributeError):
            pass
        overview = self.overview()
        return f"name:{overview.get('cluster_name')}/node:{overview.get('node')}"

    def vhosts(self) -> list[str]:
        return [v["name"] for v in self.get("vhosts")]

    def _per_vhost(self, path: str, vhost: str | None) -> list[dict[str, Any]]:
        """``GET /api/{path}/{vhost}``; for a vhost no URL can name, the whole list filtered."""
        if vhost is None:
            return list(self.get(path))
        if not addressable(vhost):
            return [item for item in self.get(path) if item.get("vhost") == vhost]
        return list(self.get(f"{path}/{_q(vhost)}"))

    def queues(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """Every queue (of one vhost, or all), with type, arguments and effective policy."""
        return self._per_vhost("queues", vhost)

    def queue(self, vhost: str, name: str) -> dict[str, Any]:
        """One queue; a name no URL can address (``.``, ``..``) is found in its vhost's list."""
        try:
            if addressable(vhost) and addressable(name):
                return self.get(f"queues/{_q(vhost)}/{_q(name)}")
            found = [q for q in self.queues(vhost) if q.get("name") == name]
            if found:
                return found[0]
            raise BrokerApiError(f"management API: queue {name!r} not listed in vhost {vhost!r}", 404)
        except BrokerApiError as exc:
            if exc.status == 404:
                raise QueueNotFoundError(f"queue {name!r} not found in vhost {vhost!r}") from None
            raise

    def policies(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return self._per_vhost("policies", vhost)

    def operator_policies(self, vhost: str | None = None) -> list[dict[str, Any]]:
        return self._per_vhost("operator-policies", vhost)

    def definitions_raw(self) -> bytes:
        """``GET /api/definitions`` exactly as the broker sends it."""
        return self.get_text("definitions")

    def stream_consumers(self, vhost: str) -> list[dict[str, Any]]:
        """Stream-protocol consumers of a vhost (rabbitmq_stream_management); empty when the plugin is off."""
        try:
            return self._per_vhost("stream/consumers", vhost)
        except BrokerApiError:
            return []
