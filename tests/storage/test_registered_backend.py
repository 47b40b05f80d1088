"""A backend the test suite registers (``memtest://``) is a backend like the built-in ones, with no edit under
``airflow_rbak/``: it parses, opens (the conformance suite runs it, ``test_conformance.py``), is judged by the access
rules and linked from a task, all through ``storage/registry.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

import airflow_rbak
from airflow_rbak.access import AccessPolicy, location_within
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.links import manifest_url
from airflow_rbak.storage import open_storage, parse_storage_url
from airflow_rbak.storage.backend import Backend
from airflow_rbak.storage.registry import backend_for, register
from airflow_rbak.storage.url import supported_schemes
from tests.storage.registered_backend import BACKEND, MemtestConfig, MemtestStorage


def test_given_the_package_when_searched_then_it_never_names_the_test_backend():
    package = Path(airflow_rbak.__file__).parent

    mentions = [p for p in package.rglob("*.py") if "memtest" in p.read_text(encoding="utf-8")]

    assert mentions == []


def test_given_a_registered_backend_when_its_url_is_parsed_and_opened_then_it_is_that_backend():
    config = parse_storage_url("memtest://shelf-a/backups/nightly")
    storage = open_storage("memtest://shelf-a/backups/nightly", keyring=None)

    assert config == MemtestConfig("shelf-a", "backups/nightly")
    assert backend_for("MEMTEST") is BACKEND and "memtest" in supported_schemes()
    assert isinstance(storage.inner.inner, MemtestStorage)  # type: ignore[attr-defined]
    assert storage.url == "memtest://shelf-a/backups/nightly"


def test_given_a_registered_backend_when_its_url_is_refused_then_the_backend_says_why():
    with pytest.raises(ConfigurationError, match="invalid memtest shelf"):
        parse_storage_url("memtest://Shelf_A/x")
    with pytest.raises(ConfigurationError, match="must not hold credentials"):
        parse_storage_url("memtest://user:secret@shelf-a/x")


def test_given_a_taken_scheme_when_another_backend_registers_it_then_it_is_refused_and_the_first_stays():
    rival = Backend(scheme="memtest", config_type=MemtestConfig, parse=BACKEND.parse, factory=MemtestStorage,
                    place=BACKEND.place, example="memtest://x")

    with pytest.raises(ConfigurationError, match="already registered"):
        register(rival)

    assert register(BACKEND) is BACKEND and backend_for("memtest") is BACKEND


@pytest.mark.parametrize(("url", "allowed"), [
    ("memtest://shelf-a/backups", "memtest://shelf-a/backups"),
    ("memtest://shelf-a/backups/nightly", "memtest://shelf-a/backups"),
    ("memtest://shelf-a/backups", "memtest://shelf-a"),
])
def test_given_a_registered_backend_when_a_location_is_below_an_allowed_one_then_it_is_within(url, allowed):
    assert location_within(url, allowed)


@pytest.mark.parametrize(("url", "allowed"), [
    ("memtest://shelf-a/backups-evil", "memtest://shelf-a/backups"),
    ("memtest://shelf-b/backups", "memtest://shelf-a/backups"),
    ("memtest://shelf-a", "memtest://shelf-a/backups"),
    ("memory://shelf-a", "memtest://shelf-a"),
    ("memtest://shelf-a", "memory://shelf-a"),
])
def test_given_a_registered_backend_when_a_location_is_beside_above_or_of_another_scheme_then_it_is_not_within(
        url, allowed):
    assert not location_within(url, allowed)


def test_given_an_allowlist_of_a_registered_backend_when_params_name_locations_then_only_those_below_pass():
    policy = AccessPolicy(storage_urls=("memtest://shelf-a/backups",), conn_ids=())

    assert policy.location_refusal("storage_url", "memtest://shelf-a/backups/eu") is None
    refusal = policy.location_refusal("storage_url", "memtest://shelf-b/backups")
    assert refusal is not None and "not an allowed storage location" in refusal
    broken = policy.location_refusal("storage_url", "memtest://Bad_Shelf")
    assert broken is not None and "invalid memtest shelf" in broken


def test_given_a_registered_backend_when_a_task_links_the_manifest_then_the_backend_s_own_link_is_used():
    assert manifest_url("memtest://shelf-a/backups", "b-1") == "https://memtest.example/shelf-a/backups/b-1/manifest.json"
