"""Sealed state: objects a run writes to a location and later reads back, authenticated with a key the location lacks.

Whoever can write to a backup location can plant a restore checkpoint, a capture checkpoint or an import record;
read back as they are, such objects would tell a run to skip records or a rollback to delete a live vhost. So every
object a run trusts later is written as an envelope::

    {"format": "rbak-sealed-v1", "purpose": "restore-progress", "key": "<its own storage key>",
     "body": {...}, "mac": "<hex HMAC-SHA256>"}

The MAC covers a canonical form of (purpose, key, body): an object copied to another key, or offered for another
purpose, fails like an edited one. Only :class:`StateSeal` (holding the key) opens an envelope; any failure is an
:class:`UntrustedStateError` naming the key and why, and each caller decides what an untrusted object means (start
again, ignore it, or refuse). Reads stat the size first and refuse objects over a cap before reading them, and count
the values before parsing (:mod:`airflow_rbak.codec.bounded_json`, which also refuses a repeated key).

The key (:func:`resolve_state_key`): ``[rbak] state_key`` when set; else derived from Airflow's ``[core] fernet_key``
(so every worker of a deployment shares it); else a random key in ``$AIRFLOW_HOME/rbak-state.key``, created 0600 on
first use (one machine only). The location never holds it. Engines take a :class:`StateSeal`; the operators and
``rbak`` build it from the configuration, :func:`default_seal` from the environment for library callers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from airflow_rbak.codec.bounded_json import JsonLimits, loads_bounded
from airflow_rbak.codec.errors import CodecError
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.storage.atomic import create_exclusive
from airflow_rbak.storage.base import ObjectNotFoundError, ObjectTooLargeError, Storage, read_bounded

FORMAT = "rbak-sealed-v1"
#: The caps of a sealed object, unless a caller names its own: checkpoints and offsets batches are a few KiB.
STATE_LIMITS = JsonLimits(max_bytes=4 * 1024**2, max_values=200_000, what="a state object")
#: The key file's name under ``$AIRFLOW_HOME``.
KEY_FILE_NAME = "rbak-state.key"
_FERNET_LABEL = b"rbak state key v1"
_MIN_KEY_CHARS = 32


class UntrustedStateError(RbakError):
    """A state object read back from a location is not one this deployment sealed; ``key`` and ``reason`` say which
    and why (no seal, bad MAC, bound to another key or purpose, unparseable, too large)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key} is not trusted state: {reason}")
        self.key, self.reason = key, reason


def _canonical(purpose: str, key: str, body: Any) -> bytes:
    """One byte string per (purpose, key, body): sorted keys, no spaces, ASCII only, no NaN."""
    return json.dumps([FORMAT, purpose, key, body], sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


class StateSeal:
    """Seals and opens state objects with one deployment's key (never shown: not in its repr, logs or errors)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ConfigurationError("a state key needs at least 16 bytes")
        self._key = key

    def __repr__(self) -> str:
        return "StateSeal(<key hidden>)"

    def _mac(self, purpose: str, key: str, body: Any) -> str:
        return hmac.new(self._key, _canonical(purpose, key, body), hashlib.sha256).hexdigest()

    def envelope(self, purpose: str, key: str, body: Any) -> dict[str, Any]:
        """The envelope of ``body`` as a JSON object, bound to ``purpose`` and ``key`` (a storage key, or another name
        of where it is kept: an Airflow run's XCom)."""
        return {"format": FORMAT, "purpose": purpose, "key": key, "body": body, "mac": self._mac(purpose, key, body)}

    def seal(self, purpose: str, key: str, body: Any) -> bytes:
        """The envelope bytes of ``body``, bound to ``purpose`` and its storage ``key``."""
        return json.dumps(self.envelope(purpose, key, body), sort_keys=True, allow_nan=False).encode()

    def open(self, purpose: str, key: str, data: bytes, limits: JsonLimits = STATE_LIMITS) -> Any:
        """The body of an envelope sealed for ``purpose`` at ``key``; :class:`UntrustedStateError` otherwise."""
        return self.open_envelope(purpose, key, _parse(key, data, limits))

    def open_envelope(self, purpose: str, key: str, envelope: Any) -> Any:
        """The body of an envelope already parsed (:meth:`envelope`'s object); :class:`UntrustedStateError` unless it
        was sealed with this key for ``purpose`` at ``key``."""
        if not isinstance(envelope, dict) or envelope.get("format") != FORMAT or not isinstance(envelope.get("mac"), str):
            raise UntrustedStateError(key, "no seal (written unsealed, by an older version or by someone else)")
        body = envelope.get("body")
        try:
            expected = self._mac(purpose, key, body)
        except (ValueError, TypeError, RecursionError):
            raise UntrustedStateError(key, "its body cannot be put in canonical form") from None
        if not hmac.compare_digest(expected, envelope["mac"]):
            if envelope.get("key") != key:
                raise UntrustedStateError(key, f"sealed for another key ({str(envelope.get('key'))[:200]!r})")
            if envelope.get("purpose") != purpose:
                raise UntrustedStateError(key, f"sealed for another purpose ({str(envelope.get('purpose'))[:80]!r})")
            raise UntrustedStateError(key, "bad MAC (edited, or sealed with another deployment's key)")
        return body

    def write(self, storage: Storage, purpose: str, key: str, body: Any) -> None:
        """Store ``body`` sealed at ``key`` (atomically, as every storage write)."""
        storage.put(key, self.seal(purpose, key, body))

    def read(self, storage: Storage, purpose: str, key: str, limits: JsonLimits = STATE_LIMITS) -> Any | None:
        """The body sealed at ``key``, or None when there is no object; :class:`UntrustedStateError` when one is
        there but not trusted. The size is stat'ed before the read, the values counted before the parse."""
        data = read_state(storage, key, limits)
        return None if data is None else self.open(purpose, key, data, limits)


def read_state(storage: Storage, key: str, limits: JsonLimits = STATE_LIMITS) -> bytes | None:
    """The bytes at ``key`` (None when absent), refused as :class:`UntrustedStateError` when over the byte cap
    (:func:`~airflow_rbak.storage.base.read_bounded`: stat'ed first, never read whole)."""
    try:
        data = read_bounded(storage, key, limits.max_bytes, limits.what)
    except ObjectNotFoundError:
        return None
    except ObjectTooLargeError as exc:
        raise UntrustedStateError(key, str(exc).removeprefix(f"{key}: ")) from None
    return data


def _parse(key: str, data: bytes, limits: JsonLimits) -> Any:
    """``data`` parsed within ``limits`` (values counted first, a repeated key refused, no NaN)."""
    try:
        return loads_bounded(data, key, limits, unique_keys=True)
    except CodecError as exc:
        raise UntrustedStateError(key, f"not JSON within its caps ({exc})") from None


def unverified_body(key: str, data: bytes, limits: JsonLimits = STATE_LIMITS) -> Any:
    """The body of an envelope (or a whole unsealed document) WITHOUT checking its seal: for evidence only.

    For readers that hold no key and use what they read only as a hint about other objects of the same location
    (encode taking a capture checkpoint's chunk count); never for anything a run acts on as authority.
    """
    document = _parse(key, data, limits)
    if isinstance(document, dict) and document.get("format") == FORMAT:
        return document.get("body")
    return document


def resolve_state_key(state_key: str | None, fernet_key: str | None, key_file: Path) -> bytes:
    """The deployment's state key: ``state_key``, else derived from ``fernet_key``'s first key, else ``key_file``'s.

    Rotating the source key makes state sealed before it untrusted: restore checkpoints start again, older import
    records can no longer be rolled back (keep ``state_key`` unchanged to avoid that).
    """
    if state_key and state_key.strip():
        text = state_key.strip()
        if len(text) < _MIN_KEY_CHARS:
            raise ConfigurationError(f"[rbak] state_key must be at least {_MIN_KEY_CHARS} characters "
                                     "(e.g. python -c 'import secrets; print(secrets.token_hex(32))')")
        return text.encode()
    first_fernet = (fernet_key or "").split(",")[0].strip()
    if first_fernet:
        return hmac.new(first_fernet.encode(), _FERNET_LABEL, hashlib.sha256).digest()
    return _key_file(key_file)


def _key_file(path: Path) -> bytes:
    """The key in ``path``, created first (0600, atomically: of two racing processes one creates, both read it)."""
    try:
        create_exclusive(path, secrets.token_hex(32).encode() + b"\n")  # mkstemp: mode 0600
        with open(path, "rb") as handle:
            text = handle.read(4096).strip()
    except OSError as exc:
        raise ConfigurationError(f"the state key file {path} cannot be created or read ({exc.strerror}); set "
                                 "[rbak] state_key") from None
    if len(text) < _MIN_KEY_CHARS:
        raise ConfigurationError(f"the state key file {path} holds fewer than {_MIN_KEY_CHARS} characters")
    return text


def default_seal(environ: dict[str, str] | None = None) -> StateSeal:
    """The seal from the environment, for callers without Airflow's configuration (library use, tests).

    ``AIRFLOW__RBAK__STATE_KEY``, else ``AIRFLOW__CORE__FERNET_KEY``, else the key file under ``$AIRFLOW_HOME``
    (``~/airflow`` unset, as Airflow's own default): the same rule the operators and ``rbak`` apply to Airflow's
    configuration.
    """
    env = os.environ if environ is None else environ
    home = Path(env.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return StateSeal(resolve_state_key(env.get("AIRFLOW__RBAK__STATE_KEY"), env.get("AIRFLOW__CORE__FERNET_KEY"),
                                       home / KEY_FILE_NAME))
