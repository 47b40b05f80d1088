"""Airflow's refusal of a restore param, worded as the form shows it beside the field (ui/param_errors.py)."""

from __future__ import annotations

import pytest

from airflow_rbak.ui.param_errors import plain_param_error


def _refusal(name: str, said: str, rule: str, where: str, schema: str, instance: str, value: str) -> str:
    """Airflow's REST answer as it words it: jsonschema's message, the failing rule and schema, the value."""
    return (f"Invalid input for param {name}: {said}\n\nFailed validating '{rule}' in schema{where}:\n    {schema}\n\n"
            f"On instance{instance}:\n    {value}")


def test_a_rate_of_zero_must_be_more_than_zero_not_zero_or_more():
    detail = _refusal("max_publish_rate", "0 is less than or equal to the minimum of 0", "exclusiveMinimum", "",
                      "{'type': ['null', 'number'],\n     'exclusiveMinimum': 0,\n     'section': 'Publishing'}", "", "0")

    assert plain_param_error(detail) == {"field": "max_publish_rate", "said": "must be more than 0 (you gave 0)"}


def test_an_empty_name_in_a_map_names_the_key_whose_value_is_empty():
    detail = _refusal("vhost_map", "'' should be non-empty", "minLength", "['additionalProperties']",
                      "{'type': 'string', 'minLength': 1}", "['shop']", "''")

    said = plain_param_error(detail)

    assert said == {"field": "vhost_map", "said": "its value for 'shop' must not be empty (you gave '')"}
    assert "too short" not in said["said"]


@pytest.mark.parametrize(("rule", "schema", "value", "expected"), [
    ("minimum", "{'type': 'integer', 'minimum': 1}", "0", "must be 1 or more (you gave 0)"),
    ("maximum", "{'type': 'integer', 'maximum': 64}", "65", "must be 64 or less (you gave 65)"),
    ("exclusiveMaximum", "{'type': 'number', 'exclusiveMaximum': 10}", "10", "must be less than 10 (you gave 10)"),
    ("type", "{'type': ['null', 'integer']}", "'x'", "must be empty or a whole number (you gave 'x')"),
    ("enum", "{'enum': ['append', 'replace']}", "'merge'", "must be one of 'append', 'replace' (you gave 'merge')"),
    ("minLength", "{'type': 'string', 'minLength': 3}", "'ab'", "must be at least 3 characters long (you gave 'ab')"),
])
def test_each_rule_says_what_the_value_must_be(rule, schema, value, expected):
    detail = _refusal("p", "(jsonschema's words)", rule, "", schema, "", value)

    assert plain_param_error(detail)["said"] == expected


def test_an_item_of_a_list_is_named_by_its_place_from_one():
    detail = _refusal("queues", "'' should be non-empty", "minLength", "['items']", "{'minLength': 1}", "[2]", "''")

    assert plain_param_error(detail)["said"] == "its item 3 must not be empty (you gave '')"


def test_an_answer_that_is_not_a_param_refusal_is_kept_to_its_first_paragraph():
    assert plain_param_error("DAG is paused\n\nmore") == {"field": None, "said": "DAG is paused"}
