"""Extra-link URLs: the manifest on each storage kind, and a queue in the management UI."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_rbak.links import RabbitMQQueueLink, RbakManifestLink, manifest_url, queue_url


def test_manifest_urls_point_at_the_manifest_without_credentials():
    assert manifest_url("file:///srv/backups", "b-1") == "file:///srv/backups/b-1/manifest.json"
    assert manifest_url("s3://bkt/pre/fix?endpoint=http://127.0.0.1:9000&path_style=true", "b-1") == \
        "http://127.0.0.1:9000/bkt/pre/fix/b-1/manifest.json"
    assert manifest_url("s3://bkt?region=eu-west-1", "b-1") == \
        "https://s3.console.aws.amazon.com/s3/object/bkt?region=eu-west-1&prefix=b-1/manifest.json"


def test_queue_urls_encode_the_vhost_and_a_slash_in_the_name():
    assert queue_url("http://mq:15672/", "/", "eu/returns") == "http://mq:15672/#/queues/%2F/eu%2Freturns"


def test_links_read_what_the_task_recorded_and_are_empty_before():
    ran = SimpleNamespace(rbak_manifest_url="file:///m", rbak_queue_url="http://q")

    assert RbakManifestLink().get_link(ran, ti_key=None) == "file:///m"
    assert RabbitMQQueueLink().get_link(ran, ti_key=None) == "http://q"
    assert RbakManifestLink().get_link(SimpleNamespace(), ti_key=None) == ""
