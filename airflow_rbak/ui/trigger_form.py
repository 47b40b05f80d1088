"""A DAG's trigger form with some params filled in, rendered from the DAG's params (no Airflow import).

Airflow 3.3's UI cannot open its own trigger form with values from a URL (it has no
``/dags/{dag_id}/trigger`` route; apache/airflow#54800), so Restore… opens this one: the params of
``rbak_restore`` as Airflow serialised them (value, JSON schema, description, section), the backup's
``storage_url`` and ``backup_id`` filled in. It submits to Airflow's REST API, which validates the
params against their schemas and checks the user may trigger the DAG, exactly as its own form does. The button is
disabled while a trigger is in flight, and the form carries the run id it triggers, so one form makes one run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from typing import Any

SCRIPT = r"""
function rbakValue(field){
  const kind=field.dataset.kind, raw=field.type==='checkbox'?field.checked:field.value;
  if(kind==='bool')return raw;
  if(raw===''&&field.dataset.nullable==='1')return null;
  if(kind==='int'||kind==='num')return raw===''?null:Number(raw);
  if(kind==='json')return JSON.parse(raw);
  return raw;
}
async function rbakPlain(form,text){
  // Airflow's refusal of a param in one sentence beside its field (param_errors.py words it)
  try{const r=await fetch(form.dataset.plain,{method:'POST',credentials:'same-origin',
      headers:{'Content-Type':'application/json'},body:JSON.stringify({detail:String(text||'')})});
    if(r.ok)return await r.json();}catch(e){}
  return {field:null,said:String(text||'').split('\n\n')[0]};
}
function rbakFieldError(form,name,text){
  const out=document.getElementById('error-'+name), field=document.getElementById('param-'+name);
  if(!out||!field)return false;
  out.textContent=text;field.setAttribute('aria-invalid','true');
  field.scrollIntoView({block:'center'});field.focus({preventScroll:true});return true;
}
function rbakClearErrors(form){
  for(const e of form.querySelectorAll('.field-error'))e.textContent='';
  for(const f of form.querySelectorAll('[aria-invalid]'))f.removeAttribute('aria-invalid');
}
async function rbakTrigger(form){
  const out=document.getElementById('trigger-result'), button=document.getElementById('trigger'), conf={};
  if(button.disabled)return false;  // one click, one run (and the run id below makes a second POST one run too)
  rbakClearErrors(form);out.className='answer muted';
  for(const field of form.querySelectorAll('[data-param]')){
    try{conf[field.dataset.param]=rbakValue(field);}
    catch(e){const text=field.dataset.param+': not valid JSON ('+e.message+')';
      out.className='answer err';out.textContent='Not triggered: '+text;
      rbakFieldError(form,field.dataset.param,'Not valid JSON: '+e.message);return false;}
  }
  button.disabled=true;out.textContent='Triggering…';
  const runs=form.dataset.runs, runId=form.dataset.runId;
  let r, body;
  try{r=await fetch(form.dataset.api,{method:'POST',credentials:'same-origin',headers:{'Content-Type':'application/json'},
    body:JSON.stringify({dag_run_id:runId,logical_date:null,conf:conf})});
    body=await r.json().catch(()=>({}));}
  catch(e){out.className='answer err';out.textContent='Not triggered: '+e;button.disabled=false;return false;}
  const link=(id)=>{const a=document.createElement('a');a.href=runs+encodeURIComponent(id);a.className='airflow';
    a.textContent=id;return a;};
  if(r.status===409){out.textContent='Already triggered from this form: ';out.appendChild(link(runId));
    out.appendChild(document.createTextNode(' (not triggered again; open Restore… again for another run)'));return false;}
  if(!r.ok){
    button.disabled=false;
    const plain=(r.status===400&&typeof body.detail==='string')?await rbakPlain(form,body.detail):null;
    out.className='answer err';
    if(plain&&plain.field){out.textContent='Not triggered: '+plain.field+' '+plain.said+'.';
      if(!rbakFieldError(form,plain.field,plain.said+'.'))out.scrollIntoView({block:'center'});}
    else{out.textContent='Not triggered: '+rbakProblem(r.status,body);out.scrollIntoView({block:'center'});}
    return false;
  }
  const a=link(body.dag_run_id);out.textContent='Triggered: ';out.appendChild(a);rbakOpen(a.href);
  return false;
}
"""


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type", [])
    return set(kind if isinstance(kind, list) else [kind])


def _input(name: str, value: Any, schema: Mapping[str, Any]) -> str:
    types = _types(schema)
    nullable = "1" if "null" in types else "0"
    common = f'id="param-{escape(name)}" name="{escape(name)}" data-param="{escape(name)}" data-nullable="{nullable}"'
    if types - {"null"} == {"boolean"}:
        return f'<input type="checkbox" {common} data-kind="bool"{" checked" if value else ""}>'
    if "enum" in schema and types - {"null"} <= {"string"}:
        options = "".join(f'<option value="{escape(str(v))}"{" selected" if v == value else ""}>{escape(str(v))}</option>'
                          for v in schema["enum"])
        return f'<select {common} data-kind="str">{options}</select>'
    if types - {"null"} in ({"integer"}, {"number"}):
        kind = "int" if "integer" in types else "num"
        shown = "" if value is None else escape(str(value))
        return f'<input type="number" step="{1 if kind == "int" else "any"}" {common} data-kind="{kind}" value="{shown}">'
    if types - {"null"} == {"string"}:
        return f'<input type="text" size="80" {common} data-kind="str" value="{escape("" if value is None else str(value))}">'
    shown = "" if value is None and nullable == "1" else json.dumps(value)
    return f'<textarea rows="2" cols="80" {common} data-kind="json">{escape(shown)}</textarea>'


def trigger_form(dag_id: str, params: Mapping[str, Mapping[str, Any]], filled: Mapping[str, Any], *,
                 api_url: str, runs_url: str, dag_url: str, run_id: str, plain_url: str) -> str:
    """The form's HTML body: one field per param, grouped by ``section`` in the params' order, ``filled`` set.

    ``run_id`` is the run this form triggers, fixed when the form is shown: Airflow keeps a run id unique, so a
    second POST of the same form (a double click, a retry after a lost answer) is refused (409) rather than making
    a second run. ``plain_url`` words Airflow's refusal of a param (param_errors.py)."""
    sections: dict[str, list[str]] = {}
    for name, param in params.items():
        schema = param.get("schema") or {}
        value = filled.get(name, param.get("value"))
        described = escape(str(param.get("description") or schema.get("description") or ""))
        mark = ' <b class="filled">filled in</b>' if name in filled else ""
        sections.setdefault(str(schema.get("section") or "Parameters"), []).append(
            f'<tr><th><label for="param-{escape(name)}">{escape(name)}</label>{mark}</th>'
            f'<td>{_input(name, value, schema)}<div class="field-error" id="error-{escape(name)}" role="alert"></div>'
            f"<div class=muted>{described}</div></td></tr>")
    blocks = "".join(f"<h2>{escape(title)}</h2><table>{''.join(rows)}</table>" for title, rows in sections.items())
    return (f'<form id="trigger-form" data-api="{escape(api_url)}" data-runs="{escape(runs_url)}" '
            f'data-run-id="{escape(run_id)}" data-plain="{escape(plain_url)}" '
            f'onsubmit="rbakTrigger(this); return false;">{blocks}'
            f'<div class="actions"><button class="btn" id="trigger" type="submit">Trigger {escape(dag_id)}</button>'
            f'<a class="airflow" href="{escape(dag_url)}">the DAG in Airflow</a> '
            f'<span id="trigger-result" class="muted answer"></span></div></form>')

