"""A message's identity: one definition, and the two digests already stored keep their exact bytes.

The expected values were computed with the code before the two definitions were merged (main at b7a4a91:
``capture_options.fingerprint`` for checkpoints, ``stream_identity.message_fingerprint`` for stream marks);
a checkpoint or a manifest written by that code must still match.
"""

from __future__ import annotations

import pika
import pytest

from airflow_rbak.broker.amqp_types import TypedBasicProperties
from airflow_rbak.capture.message_identity import (
    fingerprint,
    identity,
    stream_delivery_fingerprint,
    stream_fingerprint,
)
from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.codec.staged_records import QUORUM_BROKER_HEADERS, STREAM_BROKER_HEADERS

REDELIVERED = pika.spec.Basic.Deliver(consumer_tag="c", delivery_tag=7, redelivered=True, exchange="orders",
                                      routing_key="order.created")
FIRST = pika.spec.Basic.Deliver(consumer_tag="c", delivery_tag=1, redelivered=False, exchange="", routing_key="q")
RICH = TypedBasicProperties(
    content_type="application/json", delivery_mode=2, priority=3, correlation_id="c-1", message_id="m-1", timestamp=1712756400,
    type="t", app_id="app", cluster_id="cl",
    typed_headers=(("x-stream-offset", H.long(41)), ("b", H.long_string("β")), ("x-delivery-count", H.long(2)),
                   ("a", H.float32(1.5)), ("t", H.table([("k", H.bytes_(b"\x00\xff"))]))),
)
OTHER = TypedBasicProperties(reply_to="r", expiration="60000", user_id="guest",
                             typed_headers=(("z", H.short(-3)), ("y", H.array([H.bool_(True), H.void()]))))
DELIVERIES = {
    "rich": (REDELIVERED, RICH, b'{"n": 1}'),
    "bare": (FIRST, TypedBasicProperties(), b""),
    "binary": (REDELIVERED, OTHER, bytes(range(256))),
}
#: (checkpoint fingerprint without drops, with the quorum drop, stream fingerprint), from b7a4a91.
STORED = {
    "rich": ("b3edfc667de936091195695dae96f7bd", "419968c748f9317e881da5722115923f",
             "1fd809fe4e8921b3843f0e89c263f7dc44b229fe26a1e150c200fbc0c98e62fe"),
    "bare": ("1921d483e540560bd496033d6fb9c250", "1921d483e540560bd496033d6fb9c250",
             "48c7f469f016936915d9277e4f16d5c6c330e448810be9bc05d0e4b1e46f3739"),
    "binary": ("dd86ecf2ea86e08127a45d9a8747e3ef", "dd86ecf2ea86e08127a45d9a8747e3ef",
               "e3a1c75037faa9f8b8f26741529be2e26b3e3f3181f3eecd61d34eddc9abe4fb"),
}


@pytest.mark.parametrize("name", sorted(DELIVERIES))
def test_stored_fingerprints_keep_their_bytes(name):
    method, props, body = DELIVERIES[name]
    plain, quorum, stream = STORED[name]

    assert fingerprint(identity(method, props, body, frozenset())) == plain
    assert fingerprint(identity(method, props, body, QUORUM_BROKER_HEADERS)) == quorum
    assert stream_delivery_fingerprint(method, props, body) == stream
    assert stream_fingerprint(identity(method, props, body, STREAM_BROKER_HEADERS)) == stream


def test_delivery_state_is_not_part_of_the_identity():
    again = pika.spec.Basic.Deliver(consumer_tag="other", delivery_tag=99, redelivered=False, exchange="orders",
                                    routing_key="order.created")
    body = b'{"n": 1}'

    assert identity(again, RICH, body, QUORUM_BROKER_HEADERS) == identity(REDELIVERED, RICH, body, QUORUM_BROKER_HEADERS)
    assert stream_delivery_fingerprint(again, RICH, body) == stream_delivery_fingerprint(REDELIVERED, RICH, body)
    assert stream_delivery_fingerprint(REDELIVERED, RICH, body + b" ") != stream_delivery_fingerprint(REDELIVERED, RICH, body)
