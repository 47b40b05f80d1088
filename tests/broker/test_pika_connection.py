"""Our pika connections decode header tables typed and read wider, without touching pika for anyone else.

The first tests fail when a pika release changes an internal that ``broker/pika_connection.py`` relies on:
then that module must be adapted (or pika's range in pyproject.toml kept below that release).
"""

from __future__ import annotations

import inspect

import pika
import pika.adapters.base_connection
import pika.adapters.blocking_connection
import pika.adapters.utils.io_services_utils as io_services
import pika.channel
import pika.connection
import pika.exceptions
import pika.frame
import pytest
from pika import spec

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.amqp_types import DeliveredProperties, TypedBasicProperties
from airflow_rbak.broker.pika_connection import (
    SOCKET_READ_BYTES,
    ConfirmChannel,
    RbakSelectConnection,
    blocking_connection,
    decode_frame,
)
from airflow_rbak.codec.field_table import decimal_value
from airflow_rbak.codec.headers import HeaderValue as H

HEADERS = (("n", H.short(5)), ("when", H.timestamp(2**63 + 5)), ("price", decimal_value(2, 1999)))


def test_pika_still_decodes_its_buffer_through_read_frame():
    assert list(inspect.signature(pika.connection.Connection._read_frame).parameters) == ["self"]
    assert "self._read_frame()" in inspect.getsource(pika.connection.Connection._on_data_available)
    assert "self._frame_buffer" in inspect.getsource(pika.connection.Connection._read_frame)


def test_pika_still_hands_the_transport_over_in_proto_connection_made():
    method = pika.adapters.base_connection.BaseConnection._proto_connection_made
    assert list(inspect.signature(method).parameters) == ["self", "transport"]
    assert "self._transport = transport" in inspect.getsource(method)
    assert isinstance(io_services._AsyncTransportBase._MAX_RECV_BYTES, int)
    assert "self._MAX_RECV_BYTES" in inspect.getsource(io_services)
    # pika_connection.drop shuts that transport's socket down: the broker, not pika, gives the deliveries back
    assert "self._sock = sock" in inspect.getsource(io_services._AsyncTransportBase.__init__)


def test_pika_still_takes_an_implementation_class_and_the_frame_layout_is_the_same():
    assert "_impl_class" in inspect.signature(pika.BlockingConnection.__init__).parameters
    assert issubclass(RbakSelectConnection, pika.SelectConnection)
    assert list(inspect.signature(pika.frame.Header.__init__).parameters) == ["self", "channel_number", "body_size", "props"]
    assert (spec.FRAME_HEADER, spec.FRAME_HEADER_SIZE, spec.FRAME_END_SIZE, spec.FRAME_END) == (2, 7, 1, 206)
    assert spec.BasicProperties.INDEX == 60


def test_pika_still_keeps_the_asynchronous_channel_under_a_blocking_one():
    init = pika.adapters.blocking_connection.BlockingChannel.__init__
    assert list(inspect.signature(init).parameters)[:2] == ["self", "channel_impl"]
    assert "self._impl = channel_impl" in inspect.getsource(init)
    assert list(inspect.signature(pika.channel.Channel.confirm_delivery).parameters) == ["self", "ack_nack_callback", "callback"]
    assert list(inspect.signature(pika.channel.Channel.basic_publish).parameters) == [
        "self", "exchange", "routing_key", "body", "properties", "mandatory"]
    assert list(inspect.signature(pika.channel.Channel.add_on_return_callback).parameters) == ["self", "callback"]


def test_pika_still_sends_a_publishs_frames_through_output_marshaled_frames_and_keeps_the_body_frame_size():
    assert "self._impl = " in inspect.getsource(pika.adapters.blocking_connection.BlockingConnection.__init__)
    method = pika.connection.Connection._output_marshaled_frames
    assert list(inspect.signature(method).parameters) == ["self", "marshaled_frames"]
    assert "self._adapter_emit_data(" in inspect.getsource(method)
    assert "self._output_marshaled_frames(" in inspect.getsource(pika.connection.Connection._send_message)
    assert "self._body_max_length" in inspect.getsource(pika.connection.Connection._send_message)
    assert "self._body_max_length = " in inspect.getsource(pika.connection.Connection)


def test_a_basic_content_header_decodes_typed_and_pikas_registry_is_untouched():
    raw = pika.frame.Header(3, 11, TypedBasicProperties(message_id="m", typed_headers=HEADERS)).marshal()

    consumed, frame = decode_frame(raw + b"next frame")

    assert consumed == len(raw) and frame.channel_number == 3 and frame.body_size == 11
    assert type(frame.properties) is DeliveredProperties and set(vars(frame.properties)) == {"raw"}  # decoded when read
    assert frame.properties.typed_headers == HEADERS and frame.properties.message_id == "m"
    assert spec.props[spec.BasicProperties.INDEX] is spec.BasicProperties


def test_other_frames_and_partial_frames_are_pikas():
    method = pika.frame.Method(1, spec.Basic.Ack(delivery_tag=4)).marshal()
    header = pika.frame.Header(1, 0, TypedBasicProperties()).marshal()

    consumed, frame = decode_frame(method)
    assert consumed == len(method) and frame.method.delivery_tag == 4
    assert decode_frame(header[:-1]) == (0, None)
    assert decode_frame(b"AMQP\x00\x00\x09\x01")[1].major == 0


def test_our_connection_gets_typed_headers_and_wide_reads_and_a_plain_one_does_not(broker, vhost):
    params = broker.connection.pika_parameters(vhost)
    with blocking_connection(params) as ours, pika.BlockingConnection(params) as plain:
        channel = ours.channel()
        channel.queue_declare("q")
        channel.basic_publish("", "q", b"body", TypedBasicProperties(typed_headers=HEADERS[:1]))
        channel.basic_publish("", "q", b"body", TypedBasicProperties(typed_headers=HEADERS[:1]))
        _method, props, _body = channel.basic_get("q", auto_ack=True)
        _method, plain_props, _body = plain.channel().basic_get("q", auto_ack=True)

        assert type(props) is DeliveredProperties and amqp_types.headers_of(props) == HEADERS[:1]
        assert type(plain_props) is spec.BasicProperties and plain_props.headers == {"n": 5}
        assert ours._impl._transport._MAX_RECV_BYTES == SOCKET_READ_BYTES
        assert plain._impl._transport._MAX_RECV_BYTES != SOCKET_READ_BYTES


def test_a_confirm_channel_publishes_without_waiting_and_reports_each_confirm_and_return(broker, vhost):
    confirmed: list[int] = []
    returned: list[tuple[str, bytes]] = []
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:
        conn.channel().queue_declare("q")
        channel = ConfirmChannel(conn, lambda frame: confirmed.append(frame.method.delivery_tag),
                                 lambda _ch, method, _props, body: returned.append((method.routing_key, body)))

        for routing_key in ("q", "nowhere", "q"):
            channel.publish("", routing_key, routing_key.encode(), spec.BasicProperties(), mandatory=True)
        for _ in range(600):  # the broker may confirm several at once (multiple), so wait for the last tag
            if confirmed and confirmed[-1] == 3:
                break
            conn.process_data_events(time_limit=0.1)

        assert confirmed[-1] == 3 and returned == [("nowhere", b"nowhere")]
        assert conn.channel().queue_declare("q", passive=True).method.message_count == 2
        channel.close()
        assert not channel.is_open


def test_an_encoded_publish_writes_the_frames_pikas_publish_writes_and_the_broker_takes_them(broker, behaviour, vhost):
    """``publish_encoded`` against pika's ``basic_publish``: the same bytes, for an empty body, a small one and one
    split over several body frames; then the broker confirms, returns and delivers them as pika's."""
    props = TypedBasicProperties(content_type="text/plain", delivery_mode=2, message_id="m-1", timestamp=7,
                                 typed_headers=HEADERS)
    encoded = b"".join(props.encode())
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:
        conn.channel().queue_declare("q")
        confirmed: list[int] = []
        returned: list[str] = []
        channel = ConfirmChannel(conn, lambda frame: confirmed.append(frame.method.delivery_tag),
                                 lambda _ch, method, _props, _body: returned.append(method.routing_key))
        big = bytes(range(256)) * (conn._impl._body_max_length // 100)  # noqa: SLF001 - three body frames
        written: list[bytes] = []
        send = conn._impl._output_marshaled_frames  # noqa: SLF001
        conn._impl._output_marshaled_frames = lambda frames: written.append(b"".join(frames))  # noqa: SLF001
        try:
            for body in (b"", b"x" * 1024, big):
                channel.channel._impl.basic_publish("ex", "rk", body, props, mandatory=True)  # noqa: SLF001
                pikas = b"".join(written)
                written.clear()
                channel.publish_encoded("ex", "rk", body, encoded, mandatory=True)
                channel.flush()
                assert b"".join(written) == pikas
                written.clear()
        finally:
            conn._impl._output_marshaled_frames = send  # noqa: SLF001

        for routing_key, body in (("q", b"a"), ("nowhere", b"b"), ("q", big)):
            channel.publish_encoded("", routing_key, body, encoded, mandatory=True)
        channel.flush()
        for _ in range(600):  # the broker may confirm several at once (multiple), so wait for the last tag
            if confirmed and confirmed[-1] == 3:
                break
            conn.process_data_events(time_limit=0.1)
        assert confirmed[-1] == 3 and returned == ["nowhere"]
        reader = conn.channel()
        got = [reader.basic_get("q", auto_ack=True) for _ in range(2)]
        assert [g[2] for g in got] == [b"a", big]
        for _method, delivered, _body in got:
            # (4.x delivers a header table sorted by key, types kept: broker/versions.py HEADER_ORDER)
            sent = tuple(sorted(HEADERS, key=lambda h: h[0])) if behaviour.sorts_headers("classic") else HEADERS
            assert delivered.typed_headers == sent and delivered.message_id == "m-1" and delivered.timestamp == 7
            assert (delivered.content_type, delivered.delivery_mode) == ("text/plain", 2)


def test_an_encoded_publish_on_a_closed_channel_raises_as_pikas_does(broker, vhost):
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:
        channel = ConfirmChannel(conn, lambda _frame: None)
        channel.close()
        with pytest.raises(pika.exceptions.ChannelWrongStateError):
            channel.publish_encoded("", "q", b"x", b"\x00\x00")
