"""A stream delivery's offset is read in one place (no broker needed; the stream tests read real deliveries)."""

from __future__ import annotations

from airflow_rbak.broker.amqp_types import TypedBasicProperties
from airflow_rbak.capture.stream_identity import offset_of
from airflow_rbak.codec.headers import HeaderValue as H


def test_the_offset_is_the_x_stream_offset_header_and_none_without_it():
    with_offset = TypedBasicProperties(typed_headers=(("app", H.long_string("a")), ("x-stream-offset", H.long(41))))

    assert offset_of(with_offset) == 41
    assert offset_of(TypedBasicProperties(typed_headers=(("app", H.long_string("a")),))) is None
    assert offset_of(TypedBasicProperties()) is None
