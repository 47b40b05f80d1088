"""A request for a queue's messages in the view, read before any record is: which of its query parameters are a
filter, which pages came before it, and what the view answers when it cannot be used.

A filter or a position the view cannot use is refused with 400 (:class:`FilterRefused`), and the page keeps the form
as the user filled it, with the refusal beside the field at fault (:func:`refused_page`), so a mistyped field is
corrected where it was typed. No Airflow: the routes in :mod:`airflow_rbak.ui.app` decide who may ask.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request

from airflow_rbak.codec import QueueBackup
from airflow_rbak.repository.message_filter import FilterError
from airflow_rbak.ui.message_browser import QUERY_FILTERS, MessagePageError, Position
from airflow_rbak.ui.messages_page import BACK_PAGES, form_field
from airflow_rbak.ui.runs import RESTORE_DAG_ID

#: The messages pages' own query parameters; every other one is a filter (repository/message_filter.py).
PAGING = ("queue", "at", "limit", "back")

#: Why a user sees no bodies (docs/security.md): a body is shown to whoever may restore it, and so read it anyway.
BODIES_REFUSED = (f"Message bodies are shown only to users who may trigger {RESTORE_DAG_ID}: a body can hold "
                  "personal or secret data, and whoever may restore a message can read it on the broker anyway. "
                  "You see each message's properties and headers.")


def filter_query(request: Request) -> list[tuple[str, str]]:
    """The filter fields of the query, blanks (an empty form field) left out; an unknown field is refused."""
    found = _filled(request)
    unknown = sorted({k for k, _ in found} - set(QUERY_FILTERS))
    if unknown:
        raise HTTPException(400, f"{unknown[0][:60]}: not a filter (filters: {', '.join(QUERY_FILTERS)})")
    return found


def _filled(request: Request) -> list[tuple[str, str]]:
    return [(k, v) for k, v in request.query_params.multi_items() if k not in PAGING and v.strip()]


class FilterRefused(HTTPException):
    """A filter or position that cannot be used (400); ``field`` names the form's field when one is at fault."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(400, str(exc))
        self.field = form_field(exc.field) if isinstance(exc, FilterError) else None
        self.text = str(exc).removeprefix(f"{exc.field}: ") if isinstance(exc, FilterError) else str(exc)


def back_pages(back: str | None) -> list[str]:
    """The pages before this one (``back=1.0,1.20``), each a position, newest last."""
    try:
        return [str(Position.parse(at)) for at in (back or "").split(",") if at][-BACK_PAGES:]
    except MessagePageError as exc:
        raise FilterRefused(MessagePageError(f"back: {exc}")) from None


def refused_page(queue: QueueBackup, index: int, request: Request, limit: int, backup_id: str,
                 location: dict[str, Any], show_bodies: bool, refused: FilterRefused) -> dict[str, Any]:
    """The messages page as asked, with no messages and the refusal beside its field."""
    return {"queue": {"index": index, "vhost": queue.vhost, "name": queue.name, "queue_type": queue.queue_type,
                      "messages": queue.message_count}, "start": "", "limit": limit, "messages": [], "scanned": 0,
            "damaged": [], "next": None, "filter": None, "bodies": show_bodies, "backup_id": backup_id,
            "location": location, "filters": _filled(request), "bodies_refused": None if show_bodies
            else BODIES_REFUSED, "error": {"field": refused.field, "text": refused.text}}
