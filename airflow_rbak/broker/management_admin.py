"""The few Management API writes a restore needs: create a vhost and import definitions into it; and a restore
drill's: create its scratch vhost with a description that marks it, and delete only a vhost so marked.

The read-only client (:mod:`.management`) stays apart from these writes. Errors
(:class:`ManagementWriteError`) carry the endpoint and the broker's short reason, never credentials
or the definitions' contents.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests

from airflow_rbak.broker.errors import BrokerApiError, ManagementWriteError
from airflow_rbak.broker.management import ManagementClient, addressable, reason_of


def send(client: ManagementClient, method: str, path: str, body: Any = None) -> requests.Response:
    try:
        response = client.send(method, path, json=body, timeout=max(client.connection.timeout, 60))
    except requests.RequestException as exc:
        raise ManagementWriteError(f"management API unreachable during {method} /api/{path} ({type(exc).__name__})") from None
    if response.status_code >= 400:
        raise ManagementWriteError(
            f"management API: {method} /api/{path} failed with HTTP {response.status_code}: {reason_of(response)}")
    return response


def ensure_vhost(client: ManagementClient, vhost: str) -> bool:
    """Create ``vhost`` when missing (its creator gets full permissions); True when it was created."""
    if vhost in client.vhosts():
        return False
    if addressable(vhost):
        send(client, "PUT", f"vhosts/{quote(vhost, safe='')}")
        return True
    full = {"configure": ".*", "write": ".*", "read": ".*"}
    send(client, "POST", "definitions", {"vhosts": [{"name": vhost}],
                                          "permissions": [{"user": client.connection.username, "vhost": vhost, **full}]})
    return True


def import_vhost_definitions(client: ManagementClient, vhost: str, document: dict[str, Any]) -> None:
    """``POST /api/definitions/{vhost}``: the broker applies every item to ``vhost`` whatever it names.

    A vhost named ``.`` or ``..`` cannot be in a URL, so its items go to the global
    endpoint, each naming the vhost.
    """
    if addressable(vhost):
        send(client, "POST", f"definitions/{quote(vhost, safe='')}", document)
        return
    named = {part: [{**item, "vhost": vhost} for item in items] for part, items in document.items()}
    send(client, "POST", "definitions", named)


def create_marked_vhost(client: ManagementClient, vhost: str, description: str, tags: str) -> None:
    """Create ``vhost`` with ``description`` and ``tags`` (its creator gets full permissions); refuse when it exists.

    A ``PUT`` on an existing vhost would only update it, so the listing is read first: what this creates is new.
    """
    if not addressable(vhost):
        raise ManagementWriteError(f"vhost {vhost!r} cannot be named in a Management API URL")
    if vhost in client.vhosts():
        raise ManagementWriteError(f"vhost {vhost!r} already exists; it was not created, and it is left alone")
    send(client, "PUT", f"vhosts/{quote(vhost, safe='')}", {"description": description, "tags": tags})


def vhost_description(client: ManagementClient, vhost: str) -> str | None:
    """The description a vhost carries ('' when none: 3.x and 4.x give it at the top level or in its metadata);
    None when there is no such vhost."""
    try:
        info = client.get(f"vhosts/{quote(vhost, safe='')}")
    except BrokerApiError as exc:
        if exc.status == 404:
            return None
        raise
    described = info.get("description") or (info.get("metadata") or {}).get("description") or ""
    return str(described)


def delete_vhost(client: ManagementClient, vhost: str) -> None:
    """``DELETE /api/vhosts/{vhost}``: the vhost and everything in it (callers check it is theirs first)."""
    send(client, "DELETE", f"vhosts/{quote(vhost, safe='')}")
