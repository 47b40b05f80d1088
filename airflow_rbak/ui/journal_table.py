"""The backups view's table of a location's journals (continuous capture): per vhost, coverage, recovery point, gaps."""

from __future__ import annotations

from typing import Any

from airflow_rbak.display import count, span
from airflow_rbak.ui.markup import date as _date
from airflow_rbak.ui.markup import text as _text


def journal_table(page: dict[str, Any]) -> str:
    """The location's journals (continuous capture), one row per vhost: coverage, recovery point, gaps."""
    if page.get("journals_error"):
        return f'<div class="err">The journals of this location cannot be read: {_text(page["journals_error"])}</div>'
    journals = page.get("journals") or []
    if not journals:
        return ""
    rows = []
    for j in journals:
        ms = j["recovery_point_ms"]
        point = "-" if ms is None else f"{ms // 1000:,} seconds" if ms < 120_000 else span(ms)
        gaps = "".join(f"<li>{_date(g['from'])} .. {_date(g['to']) if g['to'] is not None else 'open'}: "
                       f"{_text(g['reason'])}</li>" for g in j["gaps"][:20])
        more = f"<li>and {len(j['gaps']) - 20:,} more</li>" if len(j["gaps"]) > 20 else ""
        refused = (f'<div class="muted">{count(len(j["refused"]), "archive")} refused: '
                   f'{_text(j["refused"][0]["backup_id"])}: {_text(j["refused"][0]["reason"])}</div>'
                   if j["refused"] else "")
        rows.append(f"<tr><td>{_text(j['vhost'])}</td><td>{_date(j['from'])}</td><td>{_date(j['to'])}</td>"
                    f"<td>{_text(point)}</td><td class=n>{j['archives']:,}</td>"
                    f"<td>{'<ul>' + gaps + more + '</ul>' if gaps else 'none'}{refused}</td></tr>")
    return ('<h3>Continuous capture (journal)</h3><table class="journals"><tr><th>Vhost</th><th>Covers from (UTC)</th>'
            "<th>Covers to (UTC)</th><th>Recovery point</th><th class=n>Archives</th><th>Gaps</th></tr>"
            + "".join(rows) + "</table>")
