"""A dead-lettered record's route, read from its ``x-death`` header: untrusted input, read strictly and bounded."""

from __future__ import annotations

import pytest

from airflow_rbak.codec.headers import HeaderValue as H
from airflow_rbak.restore.dead_letters import MAX_DEATHS, DeathHeaderError, death_route


def _death(exchange: H | None = None, keys: H | None = None, **more: H) -> H:
    pairs = [("count", H.long(1)), ("reason", H.long_string("rejected")), ("queue", H.long_string("orders"))]
    if exchange is not None:
        pairs.append(("exchange", exchange))
    if keys is not None:
        pairs.append(("routing-keys", keys))
    return H.table(pairs + list(more.items()))


def test_the_route_is_the_latest_deaths_exchange_and_routing_key():
    # Given an x-death whose first entry (the latest death) differs from the second
    latest = _death(H.long_string("work"), H.array([H.long_string("orders.eu")]))
    older = _death(H.long_string("old"), H.array([H.long_string("old.key")]))
    headers = (("tenant", H.long_string("a")), ("x-death", H.array([latest, older])))

    # Then the route is the latest one; a Bytes name is read as UTF-8, the default exchange is the empty name
    assert death_route(headers) == ("work", "orders.eu")
    assert death_route((("x-death", H.array([_death(H.bytes_(b"w\xc3\xa9"), H.array([H.bytes_(b"k")]))])),)) == ("wé", "k")
    assert death_route((("x-death", H.array([_death(H.long_string(""), H.array([H.long_string("q")]))])),)) == ("", "q")


@pytest.mark.parametrize("headers, why", [
    ((), "no x-death header"),
    ((("x-death", H.long_string("work")),), "not an array of tables"),
    ((("x-death", H.array([])),), "not an array of tables"),
    ((("x-death", H.array([H.long_string("x")])),), "not a table"),
    ((("x-death", H.array([_death(None, H.array([H.long_string("k")]))])),), "has no exchange"),
    ((("x-death", H.array([_death(H.long(5), H.array([H.long_string("k")]))])),), "exchange is a Long, not a string"),
    ((("x-death", H.array([_death(H.long_string("w"))])),), "routing-keys is missing"),
    ((("x-death", H.array([_death(H.long_string("w"), H.array([]))])),), "names 0 routing keys"),
    ((("x-death", H.array([_death(H.long_string("w"), H.array([H.long_string("a"), H.long_string("cc")]))])),),
     "also routed by CC"),
    ((("x-death", H.array([_death(H.bytes_(b"\xff"), H.array([H.long_string("k")]))])),), "not UTF-8"),
    ((("x-death", H.array([_death(H.long_string("w" * 256), H.array([H.long_string("k")]))])),), "longer than 255"),
    ((("x-death", H.array([_death(H.long_string("w"), H.array([H.long_string("k")]))] * (MAX_DEATHS + 1))),),
     f"more than {MAX_DEATHS}"),
    ((("x-death", H.array([H.table([("exchange", H.long_string("a")), ("exchange", H.long_string("b"))])])),),
     "names 'exchange' twice"),
    ((("x-death", H.array([_death(H.long_string("w"), H.array([H.long_string("k")]))])),) * 2, "more than once"),
])
def test_an_x_death_without_a_usable_route_is_refused_saying_why(headers, why):
    with pytest.raises(DeathHeaderError, match=why):
        death_route(headers)
