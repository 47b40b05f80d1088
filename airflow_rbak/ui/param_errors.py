"""Airflow's refusal of a trigger's param, said plainly beside the field it concerns (no Airflow import).

Airflow's REST API answers a param that fails its JSON schema with jsonschema's own text::

    Invalid input for param vhost_map: '' should be non-empty

    Failed validating 'minLength' in schema['additionalProperties']:
        {'type': 'string', 'minLength': 1}

    On instance['shop']:
        ''

:func:`plain_param_error` turns it into the field's name and one sentence ("its value for 'shop' must not be
empty (you gave '')"): the rule, its limit read from the schema, the part of the value it concerns, and the value.
"""

from __future__ import annotations

import ast
import re
from typing import Any

_HEAD = re.compile(r"^Invalid input for param ([^:\s]+): ([^\n]*)")
_RULE = re.compile(r"Failed validating '(\w+)' in schema([^:\n]*):\n((?:[ \t]+[^\n]*\n?)+)")
_INSTANCE = re.compile(r"On instance((?:\[[^\n]*?\])*):\n[ \t]+([^\n]*)")
_TYPES = {"integer": "a whole number", "number": "a number", "string": "text", "boolean": "true or false",
          "object": 'a JSON object, such as {"a": "b"}', "array": 'a JSON list, such as ["a", "b"]', "null": "empty"}
#: The longest value repeated back ("you gave ...").
GIVEN_CHARS = 60


def _schema(text: str) -> dict[str, Any]:
    """The failing (sub)schema as jsonschema printed it (a Python literal), or {} when it does not parse."""
    try:
        found = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return {}
    return found if isinstance(found, dict) else {}


def _part(path: str) -> str:
    """``['shop']`` -> ``its value for 'shop'``; ``[0]`` -> ``its item 1``; nested parts joined."""
    parts = []
    for key in re.findall(r"\[([^\[\]]*)\]", path):
        if key.isdigit():
            parts.append(f"item {int(key) + 1}")
        else:
            parts.append(f"value for {key}")
    return ("its " + ", ".join(parts) + " ") if parts else ""


def _count(n: Any, unit: str) -> str:
    return f"{n} {unit}" + ("" if n == 1 else "s")


def _rule(rule: str, schema: dict[str, Any], said: str) -> str:
    """What the value must be, for one failed JSON-schema rule."""
    limit = schema.get(rule)
    if rule == "minimum":
        return f"must be {limit} or more"
    if rule == "exclusiveMinimum":
        return f"must be more than {limit}"
    if rule == "maximum":
        return f"must be {limit} or less"
    if rule == "exclusiveMaximum":
        return f"must be less than {limit}"
    if rule == "minLength":
        return "must not be empty" if limit in (None, 1) else f"must be at least {_count(limit, 'character')} long"
    if rule == "maxLength":
        return f"must be at most {_count(limit, 'character')} long" if limit is not None else "is too long"
    if rule == "minItems":
        return "must not be empty" if limit in (None, 1) else f"must hold at least {_count(limit, 'item')}"
    if rule == "maxItems":
        return f"must hold at most {_count(limit, 'item')}" if limit is not None else "holds too many items"
    if rule == "type":
        kinds = limit if isinstance(limit, list) else [limit]
        return "must be " + " or ".join(_TYPES.get(str(k), str(k)) for k in kinds if k is not None)
    if rule == "enum":
        return "must be one of " + ", ".join(repr(v) for v in (limit or []))
    if rule == "pattern":
        return f"does not have the form this field takes (it must match {limit!r})"
    if rule == "required":
        return f"misses a required part: {said}"
    if rule == "additionalProperties":
        return f"has a part it does not take: {said}"
    return said


def plain_param_error(detail: str) -> dict[str, str | None]:
    """``{"field": <param name or None>, "said": <one sentence>}`` for Airflow's refusal of a trigger's params."""
    head = _HEAD.match(detail or "")
    if head is None:
        return {"field": None, "said": str(detail or "").split("\n\n")[0]}
    field, said = head[1], head[2]
    rule_match = _RULE.search(detail)
    rule = rule_match[1] if rule_match else ""
    schema = _schema(rule_match[3]) if rule_match else {}
    instance = _INSTANCE.search(detail)
    text = _part(instance[1] if instance else "") + _rule(rule, schema, said)
    if instance and rule not in ("required", "additionalProperties"):
        given = instance[2].strip()
        text += f" (you gave {given[:GIVEN_CHARS]}{'…' if len(given) > GIVEN_CHARS else ''})"
    return {"field": field, "said": text}
