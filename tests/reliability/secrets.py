"""Looking for secrets where they must never be: logs, XCom, reports, error messages, stored objects.

A secret is searched for in every form it could leak in: as it is, percent-encoded (URLs), inside
HTTP basic auth (base64 of ``user:password``), and for a password hash also its decoded bytes.
Stored objects are searched after decompression, so a compressed segment or report cannot hide one.
"""

from __future__ import annotations

import base64
import binascii
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_rbak.codec import CodecError
from airflow_rbak.codec.compression import decompress
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.layout import compression_from_key
from airflow_rbak.codec.segment import decode_payload
from airflow_rbak.storage import Storage


@dataclass(frozen=True)
class BrokerUser:
    """A broker user made for a secrets test: a password no other text contains, and its hash."""

    name: str
    password: str
    password_hash: str

    def forms(self) -> dict[str, bytes]:
        """Every form of the password and the hash worth searching for, by name."""
        raw_hash = b""
        try:
            raw_hash = base64.b64decode(self.password_hash, validate=True)
        except (binascii.Error, ValueError):
            pass
        return {
            "password": self.password.encode(),
            "password (percent-encoded)": quote(self.password, safe="").encode(),
            "password (basic auth)": base64.b64encode(f"{self.name}:{self.password}".encode()),
            "password hash": self.password_hash.encode(),
            **({"password hash (bytes)": raw_hash} if raw_hash else {}),
        }


def distinctive_password() -> str:
    """A password with URL-special characters that appears nowhere by chance."""
    return f"Rbak:S3cret@{uuid.uuid4().hex}/%"


def create_user(broker, vhost: str) -> BrokerUser:
    """An administrator (the definitions export needs it) with full permissions on ``vhost``."""
    name, password = f"secret-{uuid.uuid4().hex[:8]}", distinctive_password()
    broker.api("PUT", f"users/{name}", json={"password": password, "tags": "administrator"})
    broker.api("PUT", f"permissions/{quote(vhost, safe='')}/{name}", json={"configure": ".*", "write": ".*", "read": ".*"})
    return BrokerUser(name, password, broker.api("GET", f"users/{name}").json()["password_hash"])


@pytest.fixture
def secret_user(broker, vhost):
    """A broker user with a distinctive password (and so a distinctive hash), deleted afterwards: the tests search
    for it in logs, XCom, reports and storage (the reliability tests' restores and the DAG runs alike)."""
    user = create_user(broker, vhost)
    yield user
    broker.api("DELETE", f"users/{user.name}")


def leaks(user: BrokerUser, places: Mapping[str, bytes | str]) -> list[str]:
    """``"<secret form> in <place>"`` for each form of the user's secrets found in each place."""
    found = []
    for where, text in places.items():
        data = text.encode() if isinstance(text, str) else text
        found += [f"{form} in {where}" for form, secret in user.forms().items() if secret in data]
    return found


def readable(key: str, data: bytes) -> bytes:
    """An object's bytes as stored and, where it is compressed (a segment, a definitions file), decompressed."""
    try:
        return data + decode_payload(data, key)[1]
    except CodecError:
        pass
    compression = compression_from_key(key)
    if compression is not Compression.NONE:
        try:
            return data + decompress(data, compression, 256 << 20, key)
        except CodecError:
            pass
    return data


def stored_objects(storage: Storage, *, skip: Iterable[str] = ()) -> dict[str, bytes]:
    """Every object under the location, readable, except keys containing any of ``skip``."""
    skip = tuple(skip)
    return {f"storage {i.key}": readable(i.key, storage.get(i.key)) for i in storage.list("")
            if not any(s in i.key for s in skip)}


def log_files(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (Airflow's task and scheduler logs)."""
    return {f"log {p.relative_to(folder)}": p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}


class CommandLines:
    """Every process command line seen on the machine while a block runs (read from /proc)."""

    def __init__(self) -> None:
        self.seen: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CommandLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._sample()

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def _sample(self) -> None:
        for path in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                self.seen.add(path.read_bytes())
            except OSError:
                pass  # the process ended meanwhile
