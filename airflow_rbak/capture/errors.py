"""Errors of the capture engines: each says what failed and what to do, and never carries a secret.

They are broker errors (a capture is a RabbitMQ operation), so a caller that handles ``BrokerError`` still sees them.
"""

from __future__ import annotations

from airflow_rbak.broker.errors import BrokerError


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


class HoldLimitError(ConsumerTimeoutError):
    """The capture could not finish within the user's ``max_hold_ms``, the longest it may withhold a queue's messages
    from its consumers; it stopped and returned them, and nothing was marked complete. A bound like the broker's
    consumer timeout, only set by the user, so handled alike (a retry would hold the messages as long again)."""
