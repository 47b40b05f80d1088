"""A queue's messages as a page: the filter form, one block per message, and the pager (no Airflow import).

Every value came from a message, so every one goes through :func:`~airflow_rbak.ui.pages.text_html` and sits in
an element that shows text (``<pre>``, ``<td>``), never in an attribute unquoted nor in script: a body holding
``<script>`` shows as those characters.
"""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import urlencode

from airflow_rbak.display import count, when
from airflow_rbak.ui.message_browser import QUERY_FILTERS
from airflow_rbak.ui.pages import Links, page_frame, queue_heading, text_html

#: The form's fields: name, label, placeholder (the filter's own names, so a URL reads as the form). A placeholder
#: shows the form a value takes, never a value that could be mistaken for one already given.
_FORM = (("since", "Backed up since (UTC)", "YYYY-MM-DDThh:mm:ssZ"), ("until", "until (UTC)", "YYYY-MM-DDThh:mm:ssZ"),
         ("message_id", "message_id", ""), ("correlation_id", "correlation_id", ""),
         ("routing_key", "Routing key", "glob, e.g. orders.*"), ("exchange", "Exchange", ""),
         ("header", "Header", "name=value, e.g. x-tenant=eu"), ("content_type", "content_type", "e.g. application/json"),
         ("body_contains", "Body contains", ""), ("body_regex", "Body regex", "regular expression"))
#: Why a message shows "Redelivered yes": a backup reads a queue by taking its messages and handing them back.
REDELIVERED_WHY = ("RabbitMQ's redelivered flag. A backup reads a queue by taking its messages and handing them "
                   "back, so the broker marks them redelivered: every backup after the first sees them so, and it "
                   "does not mean a consumer failed.")
#: The most pages "previous page" goes back through (the trail rides in the URL).
BACK_PAGES = 50
_BODY_FIELDS = ("body_contains", "body_regex")
assert {name for name, _, _ in _FORM} == set(QUERY_FILTERS), "the form offers every filter"

STYLE = """
form.filters{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,1fr));gap:6px 12px;margin:8px 0 12px}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:#4a5568}
form.filters input{font-size:13px;padding:3px 5px}form.filters .go{align-self:end}
.msg{border:1px solid #e2e8f0;border-radius:6px;margin:8px 0;padding:6px 10px}
.msg h3{font-size:14px;margin:0 0 4px;font-weight:600}.msg table{margin:2px 0 6px;table-layout:fixed}
.msg th{width:150px;background:none;font-weight:500;color:#4a5568}
pre.body{background:#f7fafc;border:1px solid #e2e8f0;padding:6px 8px;max-height:320px;overflow:auto;
white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;margin:4px 0}
.kind{font-size:11px;text-transform:uppercase;color:#4a5568;margin-left:6px}
.htype{font-size:11px;margin-left:6px}abbr[title]{text-decoration:underline dotted;cursor:help}
#filter-error{margin:6px 0}
"""


def _url(links: Links, page: dict[str, Any], at: str | None, back: list[str] | None = None) -> str:
    query = [("queue", page["queue"]["index"]), *page["filters"], ("limit", page["limit"])]
    if at:
        query.append(("at", at))
    if back:
        query.append(("back", ",".join(back[-BACK_PAGES:])))
    return f"{links.backup(page['location']['id'], page['backup_id'])}/messages?{urlencode(query)}"


def form_field(name: str) -> str | None:
    """The form's field a filter error names (``headers.x-tenant`` is the Header field), or None for none."""
    name = "header" if name.startswith("header") else name
    return name if any(name == field for field, _, _ in _FORM) else None


def _form(page: dict[str, Any], links: Links) -> str:
    error = page.get("error") or {}
    fields = []
    for name, label, hint in _FORM:
        value = next((v for k, v in page["filters"] if k == name), "")
        locked = " disabled" if name in _BODY_FIELDS and not page["bodies"] else ""
        wrong = name == error.get("field")
        said = (f'<span class="field-error" id="filter-error-{name}" role="alert">{text_html(error["text"])}</span>'
                if wrong else "")
        fields.append(f'<label>{text_html(label)}<input name="{name}" id="filter-{name}" value="{text_html(value)}" '
                      f'placeholder="{text_html(hint)}"{locked}{" aria-invalid=true" if wrong else ""}>{said}</label>')
    general = (f'<div class="err" id="filter-error" role="alert">{text_html(error["text"])}</div>'
               if error and not error.get("field") else "")
    action = f"{links.backup(page['location']['id'], page['backup_id'])}/messages"
    return (f'{general}<form class="filters" id="filters" method="get" action="{text_html(action)}">'
            f'<input type="hidden" name="queue" value="{page["queue"]["index"]}">'
            f'<input type="hidden" name="limit" value="{page["limit"]}">{"".join(fields)}'
            '<div class="go"><button class="btn" type="submit" id="apply">Filter</button>'
            f'<a href="{text_html(_url(links, {**page, "filters": []}, None))}">clear</a></div></form>')


def _body(message: dict[str, Any], bodies_refused: str | None) -> str:
    body = message["body"]
    if body is None:
        return f'<p class="muted body-hidden">Body ({count(message["body_bytes"], "byte")}) not shown: see above.</p>' \
            if bodies_refused else ""
    if body["kind"] == "empty":
        return '<p class="muted">Empty body.</p>'
    more = f'<div class="muted more">… {count(body["more_bytes"], "more byte")} not shown</div>' \
        if body["more_bytes"] else ""
    return (f'<div>Body <span class="kind">{body["kind"]}</span> <span class="muted">'
            f'{count(message["body_bytes"], "byte")}</span></div><pre class="body {body["kind"]}">'
            f"{escape(body['preview'])}</pre>{more}")  # its control characters but newline and tab already shown escaped


def _message(message: dict[str, Any], bodies_refused: str | None) -> str:
    rows = [("Exchange", message["exchange"] or "(default)"), ("Routing key", message["routing_key"]),
            ("Backed up at", when(message["backed_up_at"]))]
    rows += [(name, f"{when(value * 1000)} ({value})" if name == "timestamp" else value)  # AMQP's are in seconds
             for name, value in message["properties"].items()]
    table = "".join(f"<tr><th>{text_html(k)}</th><td>{text_html(v)}</td></tr>" for k, v in rows)
    table += (f'<tr><th><abbr class="redelivered" title="{text_html(REDELIVERED_WHY)}">Redelivered</abbr></th>'
              f'<td>{"yes" if message["redelivered"] else "no"}</td></tr>')
    table += "".join(  # as the Header filter takes it, the type only where it matters
        f'<tr><th>header</th><td><code class="header">{text_html(h["shown"])}</code>'
        + (f'<span class="muted htype">({text_html(h["type"])})</span>' if h.get("type") else "") + "</td></tr>"
        for h in message.get("headers_shown", ()))
    return (f'<div class="msg" id="m-{message["position"]}"><h3>#{message["number"]:,} '
            f'<span class="muted">segment {message["position"].replace(".", ", record ")}</span></h3>'
            f"<table>{table}</table>{_body(message, bodies_refused)}</div>")


def _pager(page: dict[str, Any], links: Links) -> str:
    shown = len(page["messages"])
    said = f"{count(shown, 'message')} shown, {count(page['scanned'], 'record')} read from {page['start']}"
    if page["filter"]:
        said += f" (filter: {text_html(page['filter'])})"
    back = list(page.get("back") or [])
    parts = [f'<span id="page-said">{said}</span>',
             f'<a id="first" href="{text_html(_url(links, page, None))}">first page</a>']
    if back:
        parts.append(f'<a id="previous" href="{text_html(_url(links, page, back[-1], back[:-1]))}">← previous page</a>')
    if page["next"]:
        parts.append(f'<a id="next" href="{text_html(_url(links, page, page["next"], [*back, page["start"]]))}">'
                     "next page →</a>")
    else:
        parts.append('<span class="muted" id="end">end of the queue</span>')
    return f'<div class="pager">{" ".join(parts)}</div>'


def messages_page(page: dict[str, Any], links: Links) -> str:
    """One page of a queue's messages with the filter form; bodies only when ``page["bodies"]``."""
    q, loc = page["queue"], page["location"]
    refused = page.get("bodies_refused")
    notice = f'<div class="paused" id="bodies-refused">{text_html(refused)}</div>' if refused else ""
    notice += "".join(
        f'<div class="paused damaged-segment">Segment {text_html(d["segment"])} could not be read, so its '
        f'{count(d["records"], "record")} are not shown: {text_html(d["reason"])}</div>' for d in page.get("damaged", ()))
    if any(m["redelivered"] for m in page["messages"]):
        notice += f'<p class="muted" id="redelivered-note">Redelivered: {text_html(REDELIVERED_WHY)}</p>'
    if page.get("error"):
        blocks, pager = '<p class="muted" id="none">No messages shown: the filter cannot be used as given.</p>', ""
    else:
        pager = _pager(page, links)
        blocks = "".join(_message(m, refused) for m in page["messages"]) or \
            '<p class="muted" id="none">No message on this page matches.</p>'
    body = (f'<p><a id="back" href="{text_html(links.backup(loc["id"], page["backup_id"]))}">← backup '
            f'{text_html(page["backup_id"])}</a></p><h1>Messages of {queue_heading(q["vhost"], q["name"])}</h1>'
            f'<p class="muted">{text_html(q["queue_type"])} queue, {count(q["messages"], "message")} in backup '
            f"{text_html(page['backup_id'])}</p>{notice}{_form(page, links)}{pager}{blocks}")
    return page_frame(f"Messages of {q['name']}", body, links, style=STYLE)
