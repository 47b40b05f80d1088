"""Errors of the broker layer: each says what failed and what to do, and never carries a secret."""

from __future__ import annotations

from airflow_rbak.exceptions import RbakError


class BrokerError(RbakError):
    """A RabbitMQ operation failed."""


class BrokerUnreachableError(BrokerError):
    """The broker (AMQP, management or stream port) could not be reached or the connection was lost."""


class BrokerTlsError(BrokerUnreachableError):
    """The broker's TLS certificate was refused: signed by a CA not trusted here, or issued for another host."""


def tls_failure(exc: BaseException, where: str) -> BrokerTlsError | None:
    """A :class:`BrokerTlsError` when certificate verification is what failed, found anywhere in ``exc``.

    pika wraps the SSL error in its own connection errors and requests in its own, and both only keep
    it in their arguments; the verifier's one-line message is all a user needs (it names no secret).
    """
    seen: set[int] = set()
    pending: list[object] = [exc]
    found: str | None = None
    while pending:
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            pending.extend(item)
        if id(item) in seen or not isinstance(item, BaseException):
            continue
        seen.add(id(item))
        verify_message = getattr(item, "verify_message", None)  # ssl.SSLCertVerificationError's
        if verify_message:
            found = str(verify_message)  # the verifier's own words: best
            break
        if found is None and "CERTIFICATE_VERIFY_FAILED" in str(item):
            found = "certificate verify failed"
        pending.extend([item.__cause__, item.__context__, *item.args])
    if found is None:
        return None
    hint = ("connect with the host name the certificate names" if "mismatch" in found.lower()
            else "set ca_file to the CA that signed the broker's certificate")
    return BrokerTlsError(f"TLS certificate of {where} refused ({found[:160]}); {hint}")


class BrokerAuthError(BrokerError):
    """The broker refused the credentials (HTTP 401 or AMQP access refused)."""


class BrokerApiError(BrokerError):
    """The Management HTTP API answered with an unexpected status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ManagementWriteError(BrokerApiError):
    """A Management API write (a vhost, definitions, a delete) failed or the API was unreachable during it."""


class QueueNotFoundError(BrokerError):
    """The queue named for capture does not exist in its vhost."""


class StreamMemberUnreachableError(BrokerError):
    """No node the connection lists hosts a member (the leader or a replica) of a stream. Reading a stream, over the
    stream protocol or AMQP, needs a member on the node read from; listing such a node in ``hosts`` helps, a retry
    does not."""


class StreamLeaderPendingError(BrokerUnreachableError):
    """A stream has no leader right now (an election after its leader's node was lost); a later attempt finds one."""
