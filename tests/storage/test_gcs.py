"""What the GCS backend sends that fake-gcs-server does not check: the generation precondition of a conditional delete.

GCS refuses a DELETE whose ``ifGenerationMatch`` names another generation; the emulator deletes anyway, so the
conformance suite cannot show the refusal there. This records the requests the client makes instead.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from airflow_rbak.storage.gcs import GcsStorage
from airflow_rbak.storage.url import parse_storage_url

pytestmark = pytest.mark.gcs


class RecordingSession(requests.Session):
    """A requests session that remembers every request's method and query."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, dict[str, list[str]]]] = []

    def request(self, method, url, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        self.sent.append((method, parse_qs(urlsplit(url).query)))
        return super().request(method, url, *args, **kwargs)


def test_a_conditional_delete_and_replace_send_the_generation_they_were_given(gcs_storage_url):
    config = parse_storage_url(gcs_storage_url)
    session = RecordingSession()
    client = storage.Client(project="rbak-test", credentials=AnonymousCredentials(), _http=session,
                            client_options={"api_endpoint": config.endpoint})
    gcs = GcsStorage(config, client=client)
    gcs.put("locks/a.json", b"mine")
    _, tag = gcs.read_tagged("locks/a.json")

    assert gcs.replace_if_unchanged("locks/a.json", b"renewed", tag) is True
    _, fresh = gcs.read_tagged("locks/a.json")
    assert gcs.delete_if_unchanged("locks/a.json", fresh) is True

    conditional = [(method, query["ifGenerationMatch"]) for method, query in session.sent if "ifGenerationMatch" in query]
    assert conditional == [("POST", [tag]), ("DELETE", [fresh])]


def test_a_tag_that_is_no_generation_is_refused_without_a_request(gcs_storage_url):
    gcs = GcsStorage(parse_storage_url(gcs_storage_url))
    gcs.put("k", b"v")

    assert gcs.delete_if_unchanged("k", '"0x8D"') is False and gcs.replace_if_unchanged("k", b"x", "etag") is False
    assert gcs.get("k") == b"v"
