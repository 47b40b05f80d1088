"""The backups view's two HTML pages, rendered on the server from the catalog's JSON (no Airflow import).

Plain HTML and a few lines of script, no build step: Airflow shows the view in its navigation (an
external view, in a frame), and every link that leaves the view targets the whole window. Every value
from storage or the database is escaped, its control characters shown as on a terminal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from airflow_rbak.display import count, size
from airflow_rbak.ui.backup_catalog import ACTIONABLE
from airflow_rbak.ui.journal_table import journal_table
from airflow_rbak.ui.markup import date as _date
from airflow_rbak.ui.markup import text as _text
from airflow_rbak.ui.runs import RESTORE_DAG_ID, VERIFY_DAG_ID, restore_run_id
from airflow_rbak.ui.trigger_form import SCRIPT as TRIGGER_SCRIPT
from airflow_rbak.ui.trigger_form import trigger_form

#: For the other pages' modules: untrusted text for HTML (also in attributes: quotes are escaped too).
text_html = _text

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px;color:#1a202c;font-size:14px}
nav.top{display:flex;gap:16px;align-items:baseline;border-bottom:1px solid #e2e8f0;padding-bottom:8px;margin-bottom:14px}
nav.top .home{font-weight:600}#outside{display:none}
h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:22px 0 8px}
table{border-collapse:collapse;width:100%;margin:6px 0 14px}
th,td{border-bottom:1px solid #e2e8f0;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f7fafc;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.date{white-space:nowrap;font-variant-numeric:tabular-nums}table.backups{table-layout:fixed}
table.backups .date{white-space:normal;overflow-wrap:anywhere}.date>span{white-space:nowrap}
table.backups .badge{padding:1px 6px}table.backups th{font-size:12px;padding:4px}
#trigger-form input[type=text],#trigger-form textarea{max-width:100%;box-sizing:border-box}
ul.damage{margin:0;padding-left:18px}
.hidden-why{background:#fffaf0;border:1px solid #fbd38d;padding:6px 10px;border-radius:6px;margin:6px 0;color:#744210}
td{overflow-wrap:anywhere}table.backups{font-size:13px}table.backups td,table.backups th{padding:4px}
a{color:#2b6cb0;text-decoration:none}a:hover{text-decoration:underline}
.badge{border-radius:10px;padding:1px 8px;font-size:12px;white-space:nowrap}
.ok{background:#c6f6d5;color:#22543d}.bad{background:#fed7d7;color:#822727}.mid{background:#fefcbf;color:#744210}
.muted{color:#718096}.err{background:#fff5f5;border:1px solid #feb2b2;padding:8px 12px;border-radius:6px;color:#822727}
.loc{color:#4a5568;font-family:ui-monospace,monospace;font-size:13px;overflow-wrap:anywhere}.actions{margin:10px 0 16px}
.answer{white-space:pre-wrap;display:block;margin-top:6px}.paused{background:#fffaf0;border:1px solid #fbd38d;padding:6px 10px;border-radius:6px;margin:6px 0;color:#744210}
.btn:disabled{background:#a0aec0;cursor:default}.answer.err{color:#c53030;font-weight:600}
.field-error{color:#c53030;font-weight:600}.field-error:empty{display:none}[aria-invalid]{outline:2px solid #e53e3e}
.btn{display:inline-block;background:#3182ce;color:#fff;border:0;border-radius:6px;padding:7px 16px;font-size:14px;cursor:pointer;margin-right:8px}
.btn.secondary{background:#4a5568}.filled{color:#2f855a;font-size:11px;display:block}.pager a{margin-right:12px}details{margin:4px 0}code{font-size:12px}
"""

#: Airflow shows the view in a sandboxed frame that may not navigate the window; it is same-origin, so a link to
#: Airflow's own UI is handed to the UI's router (history + popstate) instead. Outside a frame: a plain link.
_OPEN_SCRIPT = """
function rbakOpen(href){
  if(window.top!==window){try{window.top.history.pushState(null,'',href);
    window.top.dispatchEvent(new PopStateEvent('popstate'));return;}catch(e){}}
  window.location.href=href;
}
document.addEventListener('click',e=>{const a=e.target.closest('a.airflow');
  if(a&&!e.ctrlKey&&!e.metaKey&&!e.shiftKey){e.preventDefault();rbakOpen(a.href);}});
document.addEventListener('DOMContentLoaded',()=>{const o=document.getElementById('outside');
  if(o&&window.top===window)o.style.display='inline';});
function rbakProblem(status,body){
  let d=body&&typeof body==='object'&&'detail' in body?body.detail:body;
  if(Array.isArray(d))d=d.map(e=>(Array.isArray(e.loc)?e.loc.join('.')+': ':'')+(e.msg||JSON.stringify(e))).join('\\n');
  else if(d&&typeof d==='object')d=d.reason||d.message||JSON.stringify(d,null,1);
  return 'HTTP '+status+(d?': '+d:'');
}
"""

_VERIFY_SCRIPT = """
function rbakRunLink(out,text,href,runId,after){
  const a=document.createElement('a');a.href=href+encodeURIComponent(runId);a.className='airflow';a.textContent=runId;
  out.textContent=text;out.appendChild(a);out.appendChild(document.createTextNode(after||''));
}
async function rbakVerify(button){
  const out=document.getElementById('verify-result');
  if(button.disabled)return;
  button.disabled=true;out.textContent='Triggering rbak_verify…';
  try{
    const r=await fetch(button.dataset.api,{method:'POST',credentials:'same-origin',
      headers:{'Content-Type':'application/json'},body:button.dataset.body});
    const body=await r.json().catch(()=>({}));
    if(r.status===409){rbakRunLink(out,'rbak_verify already has this run: ',button.dataset.runs,button.dataset.runId,
      ' (not queued again)');return;}
    if(!r.ok){out.textContent='rbak_verify was not triggered: '+rbakProblem(r.status,body);button.disabled=false;return;}
    rbakRunLink(out,'Triggered rbak_verify: ',button.dataset.runs,body.dag_run_id,' (queued)');
  }catch(e){out.textContent='rbak_verify was not triggered: '+e;button.disabled=false;}
}
"""

_GOOD = {"complete", "success"}
_BAD = {"damaged", "failed", "upstream_failed", "no-manifest"}


@dataclass(frozen=True)
class Links:
    """Where the pages link: Airflow's own UI and API (``airflow_root``) and this view (``view_root``)."""

    airflow_root: str
    view_root: str

    def backup(self, location_id: str, backup_id: str) -> str:
        return f"{self.view_root}/backups/{location_id}/{quote(backup_id, safe='')}"

    def listing(self, location_id: str, offset: int) -> str:
        return f"{self.view_root}/?{urlencode({'loc': location_id, 'offset': offset})}#{location_id}"

    def run(self, dag_id: str, run_id: str) -> str:
        return f"{self.airflow_root}/dags/{dag_id}/runs/{quote(run_id, safe='')}"

    def restore_form(self, location_id: str, backup_id: str) -> str:
        """The trigger form of ``rbak_restore`` with the backup's location and id filled in (trigger_form.py says why ours)."""
        return f"{self.view_root}/restore/{location_id}/{quote(backup_id, safe='')}"

    def dag(self, dag_id: str) -> str:
        return f"{self.airflow_root}/dags/{dag_id}"

    def trigger_api(self, dag_id: str) -> str:
        return f"{self.airflow_root}/api/v2/dags/{dag_id}/dagRuns"

    def airflow_view(self) -> str:
        """The view inside Airflow's UI (its navigation entry, ``url_route`` in plugin.py)."""
        return f"{self.airflow_root}/plugin/rabbitmq-backups"


def _badge(state: str | None) -> str:
    if not state:
        return '<span class="muted">-</span>'
    kind = "ok" if state in _GOOD else "bad" if state in _BAD else "mid"
    return f'<span class="badge {kind}">{_text(state)}</span>'


def page_frame(title: str, body: str, links: Links, script: str = "", style: str = "") -> str:
    """Every page in one frame: the view's name (back to the list) and, outside Airflow's UI, a way into it."""
    nav = (f'<nav class="top"><a class="home" href="{_text(links.view_root)}/">RabbitMQ backups</a>'
           f'<a id="outside" class="airflow" href="{_text(links.airflow_view())}">open in Airflow</a></nav>')
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\">"
            f"<title>{_text(title)}</title><style>{_STYLE}{style}</style><script>{_OPEN_SCRIPT}{script}</script></head>"
            f"<body>{nav}{body}</body></html>")


def _ids(ids: list[str] | tuple[str, ...], links: Links, location_id: str) -> str:
    return ", ".join(f'<a href="{_text(links.backup(location_id, i))}">{_text(i)}</a>' for i in ids) or "-"


def _verify_cell(last: dict[str, Any] | None) -> str:
    if not last:
        return '<span class="muted">never</span>'
    return f"{_badge(last['state'])} <span class=muted>{_date(last['at'])}</span>"


#: The list's columns and their widths: the same in every location's table, whatever its rows hold.
#: Inside Airflow's frame at a 1024 px window (937 px wide) each holds its widest word: "incomplete", "Messages".
_COLUMNS = (("Backup", 9, ""), ("Status", 10, ""), ("Started (UTC)", 14, ""), ("Completed (UTC)", 14, ""),
            ("Queues", 7, "n"), ("Messages", 8, "n"), ("Bytes", 8, "n"), ("Codec", 6, ""),
            ("Last verify", 10, ""), ("Depends on", 7, ""), ("Needed by", 7, ""))
assert sum(width for _, width, _ in _COLUMNS) == 100


def _list_head() -> str:
    cols = "".join(f'<col style="width:{width}%">' for _, width, _ in _COLUMNS)
    heads = "".join(f'<th class="{kind}">{name}</th>' if kind else f"<th>{name}</th>" for name, _, kind in _COLUMNS)
    return f"<colgroup>{cols}</colgroup><tr>{heads}</tr>"


def _row(b: dict[str, Any], links: Links, location_id: str) -> str:
    problem = f'<div class="muted">{_text(b["problem"])}</div>' if b.get("problem") else ""
    return (
        f'<tr><td><a href="{_text(links.backup(location_id, b["backup_id"]))}">{_text(b["backup_id"])}</a>{problem}</td>'
        f"<td>{_badge(b['status'])}</td><td>{_date(b['created_at'])}</td><td>{_date(b['completed_at'])}</td>"
        f"<td class=n>{b['queues']:,}</td><td class=n>{b['total_messages']:,}</td>"
        f"<td class=n>{_text(size(b['total_bytes']))}</td>"
        f"<td>{_text(', '.join(b['compression']) or '-')}</td><td>{_verify_cell(b['last_verify'])}</td>"
        f"<td>{_ids(b['depends_on'], links, location_id)}</td><td>{_ids(b['needed_by'], links, location_id)}</td></tr>"
    )


def _location_section(page: dict[str, Any], links: Links) -> str:
    loc = page["location"]
    head = f'<h2 id="{_text(loc["id"])}">Location <span class="loc">{_text(loc["url"])}</span></h2>'
    if page["error"]:
        return head + f'<div class="err">This location cannot be read: {_text(page["error"])}</div>'
    if not page["total"]:
        return head + '<p class="muted">No backups here yet.</p>'
    rows = "".join(_row(b, links, loc["id"]) for b in page["backups"])
    first, last = page["offset"] + 1, page["offset"] + len(page["backups"])
    pager = [f"{first:,}-{last:,} of {page['total']:,} backups (newest first)"]
    if page["offset"] > 0:
        pager.append(f'<a href="{_text(links.listing(loc["id"], max(0, page["offset"] - page["limit"])))}">newer</a>')
    if last < page["total"]:
        pager.append(f'<a href="{_text(links.listing(loc["id"], last))}">older</a>')
    return (head + journal_table(page) + f'<table class="backups">{_list_head()}{rows}</table><div class=pager>'
            f"{' '.join(pager[:1])} {' '.join(pager[1:])}</div>")


def list_page(pages: list[dict[str, Any]], links: Links) -> str:
    """Every configured location with one page of its backups (or why it cannot be read)."""
    body = "<h1>RabbitMQ backups</h1>" + "".join(_location_section(p, links) for p in pages) + ACCESS_NOTE
    return page_frame("RabbitMQ backups", body, links)


#: How users and roles are set up, said where a user meets the view (docs/airflow.md says more).
ACCESS_NOTE = ('<details class="access" id="access"><summary>Who sees what here</summary><p>Airflow decides, with its '
               "auth manager's roles: this view needs read access to the runs of rbak_backup (a viewer role). "
               "<b>Restore…</b> and message bodies need the right to trigger rbak_restore, <b>Verify</b> the right "
               "to trigger rbak_verify (with the SimpleAuthManager, role user or above, set in [core] "
               "simple_auth_manager_users; with FAB, the DAG permissions on those DAGs). The restore form is built "
               "from rbak_restore as Airflow serialised it, so the DAG must have been parsed by the dag-processor."
               "</p></details>")


def _runs_table(runs: list[dict[str, Any]], links: Links, last: str = "verify") -> str:
    """A backup's runs of one DAG; the last column is the verify task's state, or a restore's ``outcome``."""
    if not runs:
        return '<p class="muted">None recorded in Airflow.</p>'
    cell = (lambda r: _badge(r["verify_state"])) if last == "verify" else (lambda r: _text(r.get("outcome") or "-"))
    rows = "".join(
        f'<tr><td><a class="airflow" href="{_text(links.run(r["dag_id"], r["run_id"]))}">{_text(r["run_id"])}</a></td>'
        f"<td>{_text(r['dag_id'])}</td><td>{_badge(r['state'])}</td><td>{_date(r['started_at'])}</td>"
        f"<td>{_date(r['ended_at'])}</td><td>{cell(r)}</td></tr>" for r in runs)
    head = "Verify task" if last == "verify" else "Report"
    return (f"<table><tr><th>DAG run</th><th>DAG</th><th>State</th><th>Started</th><th>Ended</th><th>{head}</th></tr>"
            f"{rows}</table>")


def paused_notice(dag_id: str, links: Links) -> str:
    """Why a run triggered here would sit in "queued": the DAG is paused (Airflow pauses new DAGs by default)."""
    return (f'<div class="paused" id="paused-{dag_id}"><b>{dag_id} is paused</b> in Airflow: a run triggered here stays '
            f'queued until it is unpaused (<a class="airflow" href="{_text(links.dag(dag_id))}">{dag_id} in Airflow</a>, '
            "the toggle beside its name).</div>")


def _actions(detail: dict[str, Any], links: Links, can: dict[str, bool], paused: dict[str, bool]) -> str:
    """Restore… and Verify for users who may trigger them, each DAG's paused state beside them, and Verify held while
    a verify run of this backup is still to finish (its run id is fixed until then: a second trigger is refused)."""
    url, backup_id, status = detail["location"]["url"], detail["backup"]["backup_id"], detail["backup"]["status"]
    damage = detail["backup"].get("damage") or []
    if status not in ACTIONABLE and not damage:
        if not (can.get("restore") or can.get("verify")):
            return ""
        return (f'<div class="hidden-why" id="not-offered">Restore… and Verify are not offered: this backup is '
                f'{_text(status)} ({_text(detail["backup"].get("problem") or "what it lists is not all stored")}). '
                "Only complete and rebuilt backups are restored or verified from here.</div>")
    buttons, notices, answer = [], [], ""
    if damage and can.get("restore"):
        notices.append('<div class="hidden-why" id="no-restore">Restore… is not offered: a reader found this backup '
                       "damaged (see Damage below). Verify checks every segment again; a verify that succeeds "
                       "clears it.</div>")
    elif can.get("restore"):
        href = links.restore_form(detail["location"]["id"], backup_id)
        buttons.append(f'<a class="btn" id="restore" href="{_text(href)}">Restore…</a>')
        notices += [paused_notice(RESTORE_DAG_ID, links)] if paused.get(RESTORE_DAG_ID) else []
    if can.get("verify"):
        run_id, pending = detail["verify"]["next_run_id"], detail["verify"]["pending"]
        body = json.dumps({"dag_run_id": run_id, "logical_date": None, "conf": {"storage_url": url, "backup_id": backup_id}})
        buttons.append(
            f'<button class="btn secondary" id="verify" onclick="rbakVerify(this)"{" disabled" if pending else ""} '
            f'data-api="{_text(links.trigger_api(VERIFY_DAG_ID))}" data-runs="{_text(links.run(VERIFY_DAG_ID, ""))}" '
            f'data-run-id="{_text(run_id)}" data-body="{_text(body)}">Verify</button>')
        if pending:
            href = links.run(VERIFY_DAG_ID, pending["run_id"])
            answer = (f'rbak_verify is {_text(pending["state"])} for this backup: <a class="airflow" href="{_text(href)}">'
                      f'{_text(pending["run_id"])}</a>')
        notices += [paused_notice(VERIFY_DAG_ID, links)] if paused.get(VERIFY_DAG_ID) else []
    if not buttons:
        return ""
    return (f'<div class="actions">{"".join(buttons)}<span id="verify-result" class="muted answer">{answer}</span>'
            f'{"".join(notices)}</div>')


def _queues(detail: dict[str, Any], links: Links) -> str:
    if detail.get("hidden"):
        return f'<p class="hidden-why">Not shown: {_text(detail["hidden"])}.</p>'
    blocks = []
    loc, backup_id = detail["location"]["id"], detail["backup"]["backup_id"]
    for index, q in enumerate(detail.get("queues", [])):
        messages = f'{links.backup(loc, backup_id)}/messages?queue={index}'

        segs = "".join(
            f"<tr><td class=n>{s['sequence']}</td><td><code>{_text(s['key'])}</code></td><td class=n>{s['records']:,}</td>"
            f"<td class=n>{_text(size(s['size_bytes']))}</td><td class=n>{_text(size(s['uncompressed_bytes']))}</td>"
            f"<td>{_date(s['first_timestamp'])} .. {_date(s['last_timestamp'])}</td></tr>" for s in q["segments"])
        chain = f" · chain: {_text(' → '.join(q['chain']))}" if len(q["chain"]) > 1 else ""
        blocks.append(
            f"<details><summary>{queue_heading(q['vhost'], q['name'])} · {_text(q['queue_type'])} · "
            f"{count(q['messages'], 'message')} · {count(len(q['segments']), 'segment')}{chain} · "
            f'<a class="messages" id="messages-{index}" href="{_text(messages)}">messages</a></summary>'
            '<table><tr><th class="n">#</th><th>Segment</th>'
            '<th class="n">Records</th><th class="n">Size</th><th class="n">Uncompressed</th><th>Messages from .. to</th>'
            f"</tr>{segs}</table></details>")
    for q in detail.get("left_out", []):
        blocks.append(f"<div class=muted>{queue_heading(str(q.get('vhost', '?')), str(q.get('queue', '?')))}: "
                      f"left out ({_text(str(q.get('reason', '?')))})</div>")
    return "".join(blocks) or '<p class="muted">No queues.</p>'


def queue_heading(vhost: str, name: str) -> str:
    """``orders in vhost /``: a vhost named ``/`` beside a ``/`` separator read as "/ / orders"."""
    return f'<b class="queue">{_text(name)}</b> <span class="muted">in vhost</span> <b class="vhost">{_text(vhost)}</b>'


def _definitions(detail: dict[str, Any]) -> str:
    if detail.get("hidden"):
        return f'<p class="hidden-why">Not shown: {_text(detail["hidden"])}.</p>'
    d = detail.get("definitions")
    if not d:
        return '<p class="muted">No definitions in this backup.</p>'
    heads = "".join(f'<th class="n">{name}</th>' for name in ("Vhosts", "Queues", "Exchanges", "Users", "Size"))
    return (f'<table class="definitions" style="width:auto"><tr>{heads}</tr><tr>'
            f"<td class=n>{d['vhosts']}</td><td class=n>{d['queues']}</td><td class=n>{d['exchanges']}</td>"
            f"<td class=n>{d['users']}</td><td class=n>{_text(size(d['size_bytes']))}</td></tr></table>")


def _damaged_notice(detail: dict[str, Any]) -> str:
    """A damaged backup whose manifest still reads: what follows is what it lists, not what is stored."""
    b = detail["backup"]
    if b["status"] != "damaged" or detail.get("hidden") or b.get("damage"):
        return ""
    return (f'<div class="hidden-why" id="damaged">This backup is damaged ({_text(b.get("problem") or "?")}): what '
            "follows is what its manifest lists, and not all of it is stored.</div>")


def detail_page(detail: dict[str, Any], links: Links, can: dict[str, bool], paused: dict[str, bool]) -> str:
    """One backup: its summary, Restore… and Verify (for users who may trigger them, with their DAGs' paused state),
    queues, definitions, and the runs that made, verified and restored it."""
    b, loc, hidden = detail["backup"], detail["location"], detail.get("hidden")
    source = (f"{detail.get('source_cluster') or 'not recorded'} (RabbitMQ {detail.get('rabbitmq_version') or 'not recorded'})"
              if not hidden else f"not shown: {hidden}")
    totals = (f"{count(b['queues'], 'queue')}, {count(b['total_messages'], 'message')}, "
              f"{count(b['total_segments'], 'segment')}, {_text(size(b['total_bytes']))}") if not hidden \
        else f"not shown: {_text(hidden)}"
    facts = [("Location", f'<span class="loc">{_text(loc["url"])}</span>'), ("Status", _badge(b["status"])),
             ("Started", _date(b["created_at"])), ("Completed", _date(b["completed_at"])),
             ("Source", _text(source)), ("Totals", totals),
             ("Compression", _text(", ".join(b["compression"]) or "-")), ("Last verify", _verify_cell(b["last_verify"])),
             ("Depends on", _ids(b["depends_on"], links, loc["id"])), ("Needed by", _ids(b["needed_by"], links, loc["id"]))]
    if b.get("damage"):
        facts.append(("Damage", "<ul class=damage>" + "".join(f"<li>{_text(d)}</li>" for d in b["damage"]) + "</ul>"))
    elif b.get("problem"):
        facts.append(("Problem", _text(b["problem"])))
    table = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    body = (f'<p><a href="{_text(links.listing(loc["id"], 0))}">← all backups</a></p><h1>Backup {_text(b["backup_id"])}</h1>'
            f'{_actions(detail, links, can, paused)}<table class="facts" style="width:auto">{table}</table>'
            f"{_damaged_notice(detail)}<h2>Queues</h2>{_queues(detail, links)}<h2>Definitions</h2>{_definitions(detail)}"
            f"<h2>Made by</h2>{_runs_table(detail['runs']['made'], links)}"
            f"<h2>Verified by</h2>{_runs_table(detail['runs']['verified'], links)}"
            f"<h2>Restored by</h2>{_runs_table(detail['runs']['restored'], links, last='report')}{ACCESS_NOTE}")
    return page_frame(f"Backup {b['backup_id']}", body, links, _VERIFY_SCRIPT)


def restore_page(location: dict[str, str], backup_id: str, params: dict[str, Any], links: Links, paused: bool,
                 run_id: str | None = None) -> str:
    """``rbak_restore``'s trigger form for one backup: its location and id filled in, every other param at its default,
    the DAG's paused state above it, and the run id it triggers (a new one each time it is shown)."""
    form = trigger_form(RESTORE_DAG_ID, params, {"storage_url": location["url"], "backup_id": backup_id},
                        api_url=links.trigger_api(RESTORE_DAG_ID), runs_url=links.run(RESTORE_DAG_ID, ""),
                        dag_url=links.dag(RESTORE_DAG_ID),
                        run_id=run_id or restore_run_id(location["id"], backup_id),
                        plain_url=f"{links.view_root}/api/param-error")
    body = (f'<p><a href="{_text(links.backup(location["id"], backup_id))}">← backup {_text(backup_id)}</a></p>'
            f"<h1>Restore backup {_text(backup_id)}: trigger {RESTORE_DAG_ID}</h1>"
            f"{paused_notice(RESTORE_DAG_ID, links) if paused else ''}{form}")
    return page_frame(f"Restore {backup_id}", body, links, TRIGGER_SCRIPT)


def message_page(title: str, message: str, links: Links, back: tuple[str, str] | None = None) -> str:
    """A page that says why there is nothing to show (no access, unknown backup), with a way back."""
    href, label = back or (f"{links.view_root}/", "all backups")
    return page_frame(title, f'<p><a id="back" href="{_text(href)}">← {_text(label)}</a></p><h1>{_text(title)}</h1>'
                        f'<p class="answer">{_text(message)}</p>', links)
