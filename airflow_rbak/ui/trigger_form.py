"""A DAG's trigger form with some params filled in, rendered from the DAG's params (no Airflow import).

Airflow 3.3's UI cannot open its own trigger form with values from a URL (it has no
``/dags/{dag_id}/trigger`` route; apache/airflow#54800), so Restore… opens this one: the params of
``rbak_restore`` as Airflow serialised them (value, JSON schema, description, section), the backup's
``storage_url`` and ``backup_id`` filled in. It submits to Airflow's REST API, which validates the
params against their schemas and checks the user may trigger the DAG, exactly as its own form does.
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
const rbakTypes={integer:'a whole number',number:'a number',string:'text',boolean:'true or false',
  object:'a JSON object, such as {"a": "b"}',array:'a JSON list, such as ["a", "b"]','null':'empty'};
function rbakPlain(text){
  // Airflow's refusal of a param: "Invalid input for param NAME: MESSAGE\n\nFailed validating 'RULE' in schema..."
  const m=/^Invalid input for param ([^:\s]+): ([^\n]*)/.exec(text||'');
  if(!m)return {field:null,said:String(text||'').split('\n\n')[0]};
  const said=m[2], rule=(/Failed validating '(\w+)'/.exec(text)||[])[1]||'';
  let t;
  if(rule==='minimum'||rule==='exclusiveMinimum')t='must be '+(said.match(/minimum of (\S+)/)||[,'larger'])[1]+' or more';
  else if(rule==='maximum'||rule==='exclusiveMaximum')t='must be '+(said.match(/maximum of (\S+)/)||[,'smaller'])[1]+' or less';
  else if(rule==='type'){const k=said.match(/is not of type (.*)$/);
    t='must be '+(k?k[1].split(/, /).map(x=>rbakTypes[x.replace(/'/g,'')]||x).join(' or '):'of another type');}
  else if(rule==='enum')t='must be one of '+(said.match(/is not one of (.*)$/)||[,'the listed values'])[1];
  else if(rule==='pattern')t='does not have the form this field takes (it must match '
    +(said.match(/does not match (.*)$/)||[,'its pattern'])[1]+')';
  else if(rule==='minLength')t='is too short';else if(rule==='maxLength')t='is too long';
  else if(rule==='required')t='misses a required part: '+said;
  else if(rule==='additionalProperties')t='has a part it does not take: '+said;
  else t=said;
  const given=said.match(/^(.*?) (is|does) /);
  return {field:m[1],said:t+(given&&rule!=='required'&&rule!=='additionalProperties'?' (you gave '+given[1]+')':'')};
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
  const out=document.getElementById('trigger-result'), conf={};
  rbakClearErrors(form);out.className='answer muted';
  for(const field of form.querySelectorAll('[data-param]')){
    try{conf[field.dataset.param]=rbakValue(field);}
    catch(e){const text=field.dataset.param+': not valid JSON ('+e.message+')';
      out.className='answer err';out.textContent='Not triggered: '+text;
      rbakFieldError(form,field.dataset.param,'Not valid JSON: '+e.message);return false;}
  }
  out.textContent='Triggering…';
  const r=await fetch(form.dataset.api,{method:'POST',credentials:'same-origin',headers:{'Content-Type':'application/json'},
    body:JSON.stringify({logical_date:null,conf:conf})});
  const body=await r.json().catch(()=>({}));
  if(!r.ok){
    const plain=(r.status===400&&typeof body.detail==='string')?rbakPlain(body.detail):null;
    out.className='answer err';
    if(plain&&plain.field){out.textContent='Not triggered: '+plain.field+' '+plain.said+'.';
      if(!rbakFieldError(form,plain.field,plain.said+'.'))out.scrollIntoView({block:'center'});}
    else{out.textContent='Not triggered: '+rbakProblem(r.status,body);out.scrollIntoView({block:'center'});}
    return false;
  }
  const a=document.createElement('a');a.href=form.dataset.runs+encodeURIComponent(body.dag_run_id);a.className='airflow';
  a.textContent=body.dag_run_id;out.textContent='Triggered: ';out.appendChild(a);rbakOpen(a.href);
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
                 api_url: str, runs_url: str, dag_url: str) -> str:
    """The form's HTML body: one field per param, grouped by ``section`` in the params' order, ``filled`` set."""
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
            f'onsubmit="rbakTrigger(this); return false;">{blocks}'
            f'<div class="actions"><button class="btn" id="trigger" type="submit">Trigger {escape(dag_id)}</button>'
            f'<a class="airflow" href="{escape(dag_url)}">the DAG in Airflow</a> '
            f'<span id="trigger-result" class="muted answer"></span></div></form>')

