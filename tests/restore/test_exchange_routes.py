"""Issue 50 item 9: in exchange mode the plan counts every route (exchange, routing key) its records are published with,
and the approval request shows them per queue, bounded, every name literal (no broker: hand-built plans)."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from airflow_rbak.display import printable
from airflow_rbak.restore import QueuePlan, RestorePlan, RestoreRequest, exchange_routes
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.exchange_routes import DEFAULT_EXCHANGE, MAX_SHOWN_ROUTES, RouteCounts
from airflow_rbak.restore.plan_log import summary_lines

#: What Airflow's UI renders the request's body with: CommonMark and GFM tables.
GFM = MarkdownIt("commonmark").enable("table")
HOSTILE = ["x` | `forged` | 999 |", "a|b", "line\n| `forged` | row | 1 |", "[click](http://evil)", "<b>bold</b>", "`"]


def route_tables(body: str) -> dict[str, list[tuple[str, str, int]]]:
    """Per ``#### queue`` section, the rows of its table as the reader sees them: (exchange, routing key, messages),
    the default exchange and an empty key as ``""`` (the only cells not in a code span). Other tables (under an
    ``###`` heading) are passed over."""
    tables: dict[str, list[tuple[str, str, int]]] = {}
    section, heading, in_body, row = None, False, False, None
    for token in GFM.parse(body):
        if token.type == "heading_open":
            heading, section = token.tag == "h4", None
        elif token.type == "inline" and heading:
            section, heading = next(c.content for c in token.children if c.type == "code_inline"), False  # the queue
            tables[section] = []
        elif token.type == "tbody_open":
            in_body = True
        elif token.type == "tbody_close":
            in_body = False
        elif token.type == "tr_open" and in_body and section is not None:  # not the queues' table (under an h3)
            row = []
        elif token.type == "inline" and row is not None:
            row.append(_cell(token.children or []))
        elif token.type == "tr_close" and row is not None:
            assert section is not None and len(row) == 3, row
            tables[section].append((row[0], row[1], int(row[2])))
            row = None
    return tables


def _cell(children) -> str:
    if [c.type for c in children] == ["code_inline"]:
        return children[0].content
    text = "".join(c.content for c in children)
    return "" if text in (DEFAULT_EXCHANGE, "(empty)") else text


def _queue(name: str, routes=(), more=(0, 0), exact=True) -> QueuePlan:
    return QueuePlan(source_vhost="prod", source_queue=name, target_vhost="prod-restored", target_queue=name,
                     queue_type="classic", records_total=100, records_in_window=100, segments=(), routes=tuple(routes),
                     routes_more=more, routes_exact=exact)


def _plan(*queues: QueuePlan) -> RestorePlan:
    return RestorePlan(backup_id="daily-1", storage_url="file:///backups", window_start=None, window_end=None,
                       queues=queues, source_cluster="rabbit@old", target_cluster="rabbit@new",
                       target_cluster_id="id-x", drawn_from=("daily-1",))


EXCHANGE = RestoreRequest("memory://", publish_mode="exchange")


def test_the_default_exchange_routes_to_the_target_queue_and_routes_rank_by_count():
    counts = RouteCounts("orders-restored")
    for exchange, key in [("x", "a"), ("", "orders"), ("x", "b"), ("x", "a"), ("", "orders"), ("", "other"), ("y", "")]:
        counts.add(exchange, key)

    assert counts.table() == (("", "orders-restored", 3), ("x", "a", 2), ("x", "b", 1), ("y", "", 1))
    assert counts.more() == (0, 0) and counts.exact


def test_a_plan_keeps_its_most_used_routes_and_counts_the_rest(monkeypatch):
    monkeypatch.setattr(exchange_routes, "MAX_PLAN_ROUTES", 2)
    monkeypatch.setattr(exchange_routes, "MAX_COUNTED_ROUTES", 3)
    counts = RouteCounts("q")
    for key in ["a", "a", "a", "b", "b", "c", "d", "d", "a"]:
        counts.add("x", key)

    assert counts.table() == (("x", "a", 4), ("x", "b", 2))
    assert counts.more() == (1, 3) and not counts.exact  # route c counted; both d records past the cap


def test_routes_survive_the_json_round_trip_and_show_one_row_each_with_the_default_exchange_in_words():
    routes = [("orders.x", "new", 3), ("", "orders", 5), ("events.t", "", 1)]
    plan = _plan(_queue("orders", routes), _queue("quiet"))

    again = RestorePlan.from_json(plan.to_json())
    body = approval_body(again, EXCHANGE, "rabbitmq_default")

    assert again == plan
    assert route_tables(body) == {"prod/orders": routes}
    assert "| (AMQP default) | `orders` | 5 |" in body and "| `events.t` | (empty) | 1 |" in body
    assert "exchange mode: 3 routes (exchange and routing key) from 1 queues" in body
    lines = summary_lines(plan)
    assert "    route: exchange '(AMQP default)' routing key 'orders': 5 messages" in lines
    assert "    route: exchange 'orders.x' routing key 'new': 3 messages" in lines


def test_the_request_shows_at_most_fifty_routes_a_queue_and_counts_the_rest():
    routes = [("x", f"k{i:03d}", 100 - i) for i in range(60)]
    plan = _plan(_queue("busy", routes, more=(7, 21), exact=False))

    body = approval_body(plan, EXCHANGE, "rabbitmq_default")

    assert route_tables(body) == {"prod/busy": routes[:MAX_SHOWN_ROUTES]}
    left = routes[MAX_SHOWN_ROUTES:]
    assert f"and at least {len(left) + 7} more routes ({sum(n for _, _, n in left) + 21} messages)." in body
    assert sum(1 for line in summary_lines(plan) if line.startswith("    route:")) == MAX_SHOWN_ROUTES


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_exchange_names_and_keys_show_literally_in_one_row_each(name):
    routes = [(name, name, 2), ("plain", name, 1)]
    plan = _plan(_queue("q", routes))

    body = approval_body(plan, EXCHANGE, "rabbitmq_default")

    assert route_tables(body) == {"prod/q": [(printable(name), printable(name), 2), ("plain", printable(name), 1)]}
    kinds = {c.type for t in GFM.parse(body) if t.type == "inline" for c in t.children or []}
    assert not kinds & {"link_open", "image", "html_inline"}
    assert all("\n" not in line and "\x1b" not in line for line in summary_lines(plan))


def test_queue_mode_shows_no_routes():
    plan = _plan(_queue("orders"))

    body = approval_body(plan, RestoreRequest("memory://"), "rabbitmq_default")

    assert "Routes in exchange mode" not in body and "exchange mode:" not in body
    assert not [line for line in summary_lines(plan) if "route:" in line]
