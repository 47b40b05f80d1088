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


class QueueNotFoundError(BrokerError):
    """The queue named for capture does not exist in its vhost."""


class DeliveryLimitRiskError(BrokerError):
    """Returning captured messages would count toward the queue's delivery limit.

    Raised before a single message is consumed (unless the user allowed the
    increase), or during an allowed capture as soon as a message is seen whose
    count would reach the limit.
    """


class CaptureInterruptedError(BrokerError):
    """The capture stopped part-way (connection lost, broker stopped); a re-run resumes it."""


class CaptureIntegrityError(BrokerError):
    """What the queue holds no longer matches what an interrupted run staged; resuming would corrupt the backup."""


class UnsafeQueueError(BrokerError):
    """A queue the backup cannot read without changing it, under ``on_unsafe_queue=fail`` (nothing was received)."""


class CaptureStalledError(CaptureInterruptedError):
    """The queue stopped delivering and the broker's own counts cannot tell whether the rest was consumed by
    someone else; the capture gives everything back rather than complete with fewer messages."""


class ConsumerTimeoutError(BrokerError):
    """The capture could not give its messages back inside the broker's ``consumer_timeout``; it stopped and
    returned them (or the broker did, closing the channel), and nothing was marked complete."""
