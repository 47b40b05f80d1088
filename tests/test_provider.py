"""Provider registration: Airflow's own CLI lists the package, the rabbitmq connection type, hooks and links."""

from __future__ import annotations

import json
import os

from airflow_rbak.broker.connection import DEFAULT_MANAGEMENT_PORT, DEFAULT_STREAM_PORT
from airflow_rbak.provider import get_provider_info
from tests.conftest import TEST_STATE_KEY
from tests.dags.airflow_env import VENV_BIN, airflow_env, run


def test_the_provider_info_hands_airflow_the_hooks_form_tables():
    from airflow_rbak.provider import CONN_FIELDS, UI_FIELD_BEHAVIOUR

    info = get_provider_info()
    rabbitmq = info["connection-types"][0]
    assert rabbitmq["conn-fields"] == CONN_FIELDS and rabbitmq["ui-field-behaviour"] == UI_FIELD_BEHAVIOUR
    assert info["package-name"] == "airflow-rbak"
    assert info["connection-types"][0]["hook-class-name"] == "airflow_rbak.hooks.rabbitmq.RabbitMQHook"


def test_the_forms_port_defaults_are_the_connections():
    fields = get_provider_info()["connection-types"][0]["conn-fields"]
    placeholders = get_provider_info()["connection-types"][0]["ui-field-behaviour"]["placeholders"]

    assert (fields["management_port"]["schema"]["default"], fields["stream_port"]["schema"]["default"]) == (
        DEFAULT_MANAGEMENT_PORT, DEFAULT_STREAM_PORT)
    assert (placeholders["management_port"], placeholders["stream_port"]) == (
        str(DEFAULT_MANAGEMENT_PORT), str(DEFAULT_STREAM_PORT))


def test_airflow_lists_the_provider_its_connection_type_and_extra_links(tmp_path):
    env = airflow_env(tmp_path)
    airflow = str(VENV_BIN / "airflow")
    script = (
        "import json; from airflow.providers_manager import ProvidersManager as P; p = P();"
        "h = p.hooks['rabbitmq'];"
        "print(json.dumps({'providers': sorted(p.providers), 'hook': h.hook_class_name, 'label': h.connection_testable,"
        "'links': sorted(p.extra_links_class_names), 'widgets': sorted(k for k in p.connection_form_widgets if 'rabbitmq' in k),"
        "'behaviour': p.field_behaviours.get('rabbitmq')}))"
    )
    done = run([str(VENV_BIN / "python"), "-c", script], env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert "airflow-rbak" in facts["providers"]
    assert facts["hook"] == "airflow_rbak.hooks.rabbitmq.RabbitMQHook"
    assert {"airflow_rbak.links.RbakManifestLink", "airflow_rbak.links.RabbitMQQueueLink"} <= set(facts["links"])
    assert "extra__rabbitmq__management_port" in facts["widgets"]
    assert facts["behaviour"]["placeholders"]["extra__rabbitmq__management_port"] == "15672" or \
        facts["behaviour"]["placeholders"].get("management_port") == "15672"

    listed = run([airflow, "providers", "list", "-o", "json"], env, timeout=120)
    assert any(p["package_name"] == "airflow-rbak" for p in json.loads(listed.stdout)), listed.stderr[-2000:]


def test_airflow_config_list_shows_the_rbak_section_with_every_default_description_and_a_value_set_in_the_environment(
        tmp_path):
    from airflow_rbak.provider import CONFIG_OPTIONS

    # Given Airflow with [rbak] options set the way Airflow takes any option (the tests' environment sets six more)
    env = airflow_env(tmp_path, AIRFLOW__RBAK__POOL="rbak-broker")
    given = {name: env[f"AIRFLOW__RBAK__{name.upper()}"] for name in CONFIG_OPTIONS if f"AIRFLOW__RBAK__{name.upper()}" in env}
    assert given == {"pool": "rbak-broker", "backup_schedule": "none", "task_retries": "0", "allowed_storage_urls": "*",
                     "allowed_conn_ids": "*", "allow_skip_approval": "True", "state_key": TEST_STATE_KEY,
                     "state_dir": os.environ["AIRFLOW__RBAK__STATE_DIR"]}
    assert get_provider_info()["config"]["rbak"]["options"]["state_key"]["sensitive"] is True

    # When its own CLI lists the section
    done = run([str(VENV_BIN / "airflow"), "config", "list", "--section", "rbak", "--include-descriptions",
                "--show-values", "--color", "off"], env, timeout=180)

    # Then every option is there with its description, the defaults as the provider declares them, and the value set
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "[rbak]"
    for name, option in CONFIG_OPTIONS.items():
        assert f"# {option['description']}" in lines, name
        value = given.get(name, option["default"])
        assert (f"{name} = {value}" if value else f"# {name} = ") in lines, name
