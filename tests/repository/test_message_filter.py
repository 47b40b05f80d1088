"""MessageFilter: each field selects what its docs say, untrusted input is refused by field, a runaway regex stops."""

from __future__ import annotations

import time

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_rbak.codec import BackupProperties, BackupRecord, HeaderValue
from airflow_rbak.codec.records import decode_record, encode_record
from airflow_rbak.repository.body_regex import REGEX_SECONDS, RegexTimeoutError, required_texts
from airflow_rbak.repository.filter_values import MAX_BODY_CONTAINS_BYTES, MAX_HEADERS, MAX_PATTERN_CHARS, FilterError
from airflow_rbak.repository.message_filter import PARAM_NAMES, MessageFilter

T0 = 1_732_240_800_000  # 2024-11-22T02:00:00Z


def record(**kw) -> BackupRecord:
    props = kw.pop("properties", {})
    return BackupRecord(
        body=kw.pop("body", b'{"order": 4711}'),
        properties=BackupProperties(**{"message_id": "m-1", "correlation_id": "c-1", "content_type": "application/json",
                                       **props}),
        headers=kw.pop("headers", (("x-tenant", HeaderValue.long_string("acme")), ("x-n", HeaderValue.long(5)))),
        exchange=kw.pop("exchange", "orders.exchange"),
        routing_key=kw.pop("routing_key", "orders.eu.paid"),
        backed_up_at=kw.pop("backed_up_at", T0),
        source_queue="orders",
        source_vhost="/",
        **kw,
    )


def test_an_empty_filter_selects_every_record():
    f = MessageFilter()
    assert f.selects_all and f.matches(record()) and f.matches(record(body=b""))
    assert f.describe() == "every message"
    assert MessageFilter.from_params({}) == f == MessageFilter.from_params(None)
    assert MessageFilter.from_params({"message_id": "", "headers": {}, "since": None}) == f


def test_the_window_reads_backed_up_at_with_both_ends_inclusive():
    f = MessageFilter(since=T0, until=T0 + 1000)
    assert f.matches(record(backed_up_at=T0)) and f.matches(record(backed_up_at=T0 + 1000))
    assert not f.matches(record(backed_up_at=T0 - 1)) and not f.matches(record(backed_up_at=T0 + 1001))
    # the publisher's AMQP timestamp (seconds) is not what the window means
    assert not f.matches(record(backed_up_at=T0 - 1, properties={"timestamp": T0 // 1000}))


def test_window_ends_are_epoch_ms_or_iso_8601_utc_by_default():
    f = MessageFilter.from_params({"since": "2024-11-22T02:00:00Z", "until": "2024-11-22T03:00:00"})
    assert (f.since, f.until) == (T0, T0 + 3_600_000)
    assert MessageFilter.from_params({"since": str(T0)}).since == T0
    assert MessageFilter.from_params({"since": "2024-11-22T03:00:00+01:00"}).since == T0


@pytest.mark.parametrize(
    "name, hit, miss",
    [
        ("message_id", "m-1", "m-2"),
        ("correlation_id", "c-1", "C-1"),
        ("content_type", "application/json", "text/plain"),
    ],
)
def test_each_property_field_is_an_exact_case_sensitive_equality(name, hit, miss):
    assert MessageFilter(**{name: hit}).matches(record())
    assert not MessageFilter(**{name: miss}).matches(record())
    assert not MessageFilter(**{name: hit}).matches(record(properties={name: None}))


def test_exchange_is_equality_and_the_default_exchange_is_not_selectable_by_empty_text():
    assert MessageFilter(exchange="orders.exchange").matches(record())
    assert not MessageFilter(exchange="orders").matches(record())
    with pytest.raises(FilterError) as err:
        MessageFilter(exchange="")
    assert err.value.field == "exchange"


@pytest.mark.parametrize("glob, selected", [
    ("orders.*", True), ("orders.eu.paid", True), ("*.paid", True), ("orders.??.paid", True), ("orders.[ef]u.*", True),
    ("orders", False), ("Orders.*", False), ("*.refunded", False),
])
def test_routing_key_is_a_whole_key_case_sensitive_glob(glob, selected):
    assert MessageFilter(routing_key=glob).matches(record()) is selected


def test_a_glob_with_many_stars_cannot_backtrack_without_bound():
    f = MessageFilter(routing_key="*a" * 40 + "b")
    started = time.monotonic()
    assert not f.matches(record(routing_key="a" * 255))
    assert time.monotonic() - started < 1


def test_headers_are_compared_as_text_when_given_text_and_by_type_otherwise():
    r = record(headers=(
        ("x-tenant", HeaderValue.long_string("acme")), ("x-n", HeaderValue.long(5)), ("x-ok", HeaderValue.bool_(True)),
        ("x-raw", HeaderValue.bytes_(b"abc")), ("x-void", HeaderValue.void()), ("x-f", HeaderValue.double(1.5)),
        ("x-t", HeaderValue.table([("a", HeaderValue.long(1))])),
    ))
    for wanted in ({"x-tenant": "acme"}, {"x-n": "5"}, {"x-n": 5}, {"x-ok": "true"}, {"x-ok": True},
                   {"x-raw": "abc"}, {"x-void": None}, {"x-f": 1.5}, {"x-tenant": "acme", "x-n": 5}):
        assert MessageFilter(headers=wanted).matches(r), wanted
    for wanted in ({"x-tenant": "ACME"}, {"x-n": 6}, {"x-n": True}, {"x-ok": 1}, {"x-tenant": None},
                   {"x-missing": "acme"}, {"x-t": "a"}, {"x-tenant": "acme", "x-n": 6}):
        assert not MessageFilter(headers=wanted).matches(r), wanted


def test_a_header_named_twice_on_the_record_matches_on_either_value():
    r = record(headers=(("x-k", HeaderValue.long_string("a")), ("x-k", HeaderValue.long_string("b"))))
    assert MessageFilter(headers={"x-k": "b"}).matches(r) and MessageFilter(headers={"x-k": "a"}).matches(r)


def test_body_contains_takes_text_as_utf8_or_bytes():
    assert MessageFilter(body_contains="4711").matches(record())
    assert MessageFilter(body_contains=b"\xff\x00").matches(record(body=b"a\xff\x00b"))
    assert MessageFilter(body_contains="é").matches(record(body="café".encode()))
    assert not MessageFilter(body_contains="4712").matches(record())
    assert not MessageFilter(body_contains="x").matches(record(body=b""))


def test_body_regex_searches_the_body_read_as_utf8():
    assert MessageFilter(body_regex=r'"order":\s*47\d\d').matches(record())
    assert MessageFilter(body_regex="^caf\u00e9$").matches(record(body="café".encode()))
    assert MessageFilter(body_regex="a\ufffdb").matches(record(body=b"a\xffb"))  # not UTF-8: read as U+FFFD
    assert not MessageFilter(body_regex="^4711").matches(record())


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$", r"^(a|a?)+$", r"(\w+\s?)*$"])
def test_a_pathological_regex_stops_within_its_bound_and_says_so(pattern):
    f = MessageFilter(body_regex=pattern)
    started = time.monotonic()
    with pytest.raises(RegexTimeoutError) as err:
        f.matches(record(body=b"a" * 5000 + b"!"))
    elapsed = time.monotonic() - started
    assert elapsed < REGEX_SECONDS + 2  # the bound plus scheduling on a busy machine, not minutes
    assert err.value.field == "body_regex" and "took longer than" in str(err.value) and "simplify" in str(err.value)


@pytest.mark.parametrize("pattern, texts", [
    ("ZZZZ[0-9]{2}QQ", ("ZZZZ", "QQ")),
    (r"order-\d+ paid", ("order-", " paid")),
    ("colou?r", ("colo", "r")),
    ("(abc)?def", ("def",)),
    ("a{2}bc", ("bc",)),
    (r"\.com$", ("com",)),
    ("a|b", ()),  # alternation at the top: no text is in every match
    ("(?i)abc", ()),  # a flag changes what a literal matches
    (r"\x41BC", ()),  # an escape's length is not guessed
    ("[[:alpha:]]x", ()),  # read differently by re and regex
    ("(ab", ()),
])
def test_required_texts_are_read_conservatively(pattern, texts):
    assert required_texts(pattern) == texts


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab1.*+?|()[]{}^$\\-,:2é", max_size=12), st.text(alphabet="ab1-,:2é{}()[]", max_size=20))
def test_every_match_holds_every_required_text(pattern, body):
    try:
        compiled = regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError):
        return
    if compiled.search(body):
        assert all(text in body for text in required_texts(pattern)), (pattern, body)


def test_a_body_without_the_patterns_text_is_not_searched_at_all():
    # the pattern would backtrack for ever on this body, but the body lacks its "x"
    assert not MessageFilter(body_regex=r"x(a+)+$").matches(record(body=b"a" * 5000 + b"!"))


def test_fields_combine_with_and():
    f = MessageFilter(message_id="m-1", routing_key="orders.*", headers={"x-tenant": "acme"}, body_contains="4711")
    assert f.matches(record())
    assert not f.matches(record(routing_key="refunds.eu"))
    assert not f.matches(record(body=b"{}"))


def test_the_filter_reads_records_decoded_from_their_stored_bytes():
    stored = decode_record(encode_record(record()))
    assert MessageFilter(headers={"x-n": 5, "x-tenant": "acme"}, message_id="m-1", body_regex="4711").matches(stored)


@pytest.mark.parametrize(
    "params, field",
    [
        ({"mesage_id": "m-1"}, "mesage_id"),
        ({"since": "yesterday"}, "since"),
        ({"since": True}, "since"),
        ({"until": 1.5}, "until"),
        ({"since": T0 + 1, "until": T0}, "since"),
        ({"message_id": 4711}, "message_id"),
        ({"routing_key": "*" * (MAX_PATTERN_CHARS + 1)}, "routing_key"),
        ({"headers": "x-n=5"}, "headers"),
        ({"headers": {"x-n": [5]}}, "headers.x-n"),
        ({"headers": {"x-n": {"Long": 5}}}, "headers.x-n"),
        ({"headers": {f"h{i}": "v" for i in range(MAX_HEADERS + 1)}}, "headers"),
        ({"body_contains": 4711}, "body_contains"),
        ({"body_contains": "x" * (MAX_BODY_CONTAINS_BYTES + 1)}, "body_contains"),
        ({"body_contains_hex": "zz"}, "body_contains_hex"),
        ({"body_contains": "a", "body_contains_hex": "61"}, "body_contains_hex"),
        ({"body_regex": "(unclosed"}, "body_regex"),
        ({"body_regex": "a" * (MAX_PATTERN_CHARS + 1)}, "body_regex"),
        ({"body_regex": ["a"]}, "body_regex"),
    ],
)
def test_untrusted_params_are_refused_naming_the_field(params, field):
    with pytest.raises(FilterError) as err:
        MessageFilter.from_params(params)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


def test_params_that_are_not_an_object_are_refused():
    with pytest.raises(FilterError):
        MessageFilter.from_params(["message_id", "m-1"])  # type: ignore[arg-type]


def test_to_params_reads_back_to_an_equal_filter():
    f = MessageFilter(since=T0, until=T0 + 5, message_id="m-1", correlation_id="c", routing_key="a.*", exchange="x",
                      headers={"x-n": 5, "x-t": "acme", "x-b": False, "x-v": None}, content_type="text/plain",
                      body_contains="4711", body_regex="47.1")
    assert MessageFilter.from_params(f.to_params()) == f
    assert hash(MessageFilter.from_params(f.to_params())) == hash(f)
    binary = MessageFilter(body_contains=b"\xff\x00")
    assert binary.to_params() == {"body_contains_hex": "ff00"}
    assert MessageFilter.from_params(binary.to_params()) == binary
    assert set(f.to_params()) == set(PARAM_NAMES)


def test_describe_names_every_condition_on_one_line():
    f = MessageFilter(since=T0, until=T0 + 1500, message_id="m-1", routing_key="orders.*", exchange="ex",
                      headers={"x-n": 5}, content_type="application/json", body_contains="4711", body_regex="47.1")
    assert f.describe() == (
        "messages backed up from 2024-11-22T02:00:00Z to 2024-11-22T02:00:01.500Z with message_id 'm-1' and "
        "routing key like 'orders.*' and exchange 'ex' and header 'x-n' = 5 and content type 'application/json' "
        "and body containing '4711' and body matching /47.1/"
    )
    assert MessageFilter(since=T0).describe() == "messages backed up at or after 2024-11-22T02:00:00Z"
    assert MessageFilter(body_contains=b"\xff").describe() == "messages with body containing hex ff"


def test_describe_cannot_be_broken_by_the_values_it_shows():
    text = MessageFilter(message_id="a\nb'\x1b[31m", body_regex="x\ny").describe()
    assert "\n" not in text and "\x1b" not in text
    assert text == "messages with message_id 'a\\nb\\'\\x1b[31m' and body matching /x\\ny/"


def test_needles_are_the_quoted_exact_values_no_json_writer_escapes():
    f = MessageFilter(message_id="order-4711", correlation_id="c 1", exchange="a/b", content_type="café",
                      routing_key="x", body_contains="y")
    assert f.needles() == (b'"order-4711"', b'"c 1"')
    assert MessageFilter(message_id='a"b').needles() == () and MessageFilter(message_id="a\\b").needles() == ()
    stored = encode_record(record(properties={"message_id": "order-4711", "correlation_id": "c 1"}))
    assert all(needle in stored for needle in f.needles())


def test_the_prefilter_asks_only_what_every_match_has():
    from airflow_rbak.codec.record_stream import KEEP_ALL, Prefilter

    assert MessageFilter().prefilter() == KEEP_ALL
    assert MessageFilter(since=T0, until=T0 + 5, body_regex="order-[0-9]+ paid", routing_key="eu.*.paid.?",
                         headers={"x-tenant": "acme", "x-n": 5}).prefilter() == Prefilter(
        b"order-", T0, T0 + 5, ".paid.", "x-n", None)  # the first header by name; a number is compared in Python
    assert MessageFilter(body_contains=b"\x00\xff", body_regex="abc", routing_key="[ab]x",
                         headers={"x-tenant": "acme"}).prefilter() == Prefilter(
        b"\x00\xff", key_text="", header_name="x-tenant", header_text="acme")  # a set: no routing-key text
