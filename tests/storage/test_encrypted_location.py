"""Encryption bound to its location, and what a retired key may still do (issue 51).

Every object of a location whose marker holds an identity is sealed for that identity: copied byte for byte into
another location that shares the keys, it is refused there naming the location. A location marked before identities
reads and writes as before. A retired key opens only what its retirement record pinned.
"""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.encrypted import (
    MAGIC,
    MARKER_KEY,
    BadMarkerError,
    ForeignLocationError,
    UnpinnedObjectError,
    seal,
)
from airflow_rbak.storage.encryption_records import retirement_key
from airflow_rbak.storage.key_retirement import retire_key
from airflow_rbak.storage.keyring import new_key_text, parse_keyring

K1, K2 = new_key_text("k1"), new_key_text("k2")
OBJECT = "b1/queues/prod/orders/segment-0001.zst"
LEGACY_MARKER = json.dumps({"cipher": "AES-256-GCM", "format": "rbak-encryption-v1", "note": "as 0.x wrote it"},
                           sort_keys=True).encode()


def _url() -> str:
    return f"memory://bound-{uuid.uuid4().hex}"


def _raw(url: str):
    return open_storage(url, keyring=None).inner  # underneath the unkeyed guard: the stored bytes


def _version(url: str, key: str) -> int:
    return _raw(url).get(key)[len(MAGIC)]


def test_a_new_location_is_marked_with_a_random_identity_and_seals_every_object_for_it():
    first, second = _url(), _url()
    for url in (first, second):
        open_storage(url, keyring=parse_keyring(K1)).put(OBJECT, b"orders")

    ids = [json.loads(_raw(url).get(MARKER_KEY))["location_id"] for url in (first, second)]

    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids) and ids[0] != ids[1]
    assert _version(first, OBJECT) == 2
    assert open_storage(first, keyring=parse_keyring(K1)).location_id == ids[0]


@pytest.mark.parametrize("same_key", [True, False])
def test_an_object_copied_to_another_location_with_the_same_keys_is_refused_there_naming_the_location(same_key):
    # Given two locations that share their keys, one object written at the first
    source, target = _url(), _url()
    open_storage(source, keyring=parse_keyring(K1)).put(OBJECT, b"card 4111")
    open_storage(target, keyring=parse_keyring(K1)).put("b2/manifest.json", b"{}")  # marks it: its own identity
    key = OBJECT if same_key else "b2/queues/prod/orders/segment-0001.zst"

    # When its stored bytes are copied there without re-sealing
    _raw(target).put(key, _raw(source).get(OBJECT))

    # Then the second location refuses it, naming itself and the object; the source still reads it
    with pytest.raises(ForeignLocationError) as caught:
        open_storage(target, keyring=parse_keyring(K1)).get(key)
    assert caught.value.key == key and key in str(caught.value) and target in str(caught.value)
    assert "sealed for another location" in str(caught.value)
    assert open_storage(source, keyring=parse_keyring(K1)).get(OBJECT) == b"card 4111"


def test_a_location_marked_before_identities_reads_and_writes_as_before_and_refuses_a_bound_object():
    # Given a location as the first encrypted version left it: a marker without identity, envelope 1 objects
    legacy, bound = _url(), _url()
    _raw(legacy).put(MARKER_KEY, LEGACY_MARKER)
    _raw(legacy).put(OBJECT, seal(parse_keyring(K1), OBJECT, b"old"))
    open_storage(bound, keyring=parse_keyring(K1)).put(OBJECT, b"new")

    # When it is read and written by this version
    storage = open_storage(legacy, keyring=parse_keyring(K1))
    storage.put("b1/manifest.json", b"{}")

    # Then both read, the new object is an envelope 1 too, and the marker is unchanged
    assert storage.get(OBJECT) == b"old" and storage.get("b1/manifest.json") == b"{}"
    assert storage.location_id is None and _version(legacy, "b1/manifest.json") == 1
    assert _raw(legacy).get(MARKER_KEY) == LEGACY_MARKER
    # and an object sealed for a bound location is refused there, and a legacy one at a bound location
    _raw(legacy).put("b1/copied", _raw(bound).get(OBJECT))
    _raw(bound).put("b1/copied", _raw(legacy).get(OBJECT))
    with pytest.raises(ForeignLocationError, match=f"b1/copied: sealed for a location with an identity, but {legacy}"):
        storage.get("b1/copied")
    with pytest.raises(ForeignLocationError, match=f"b1/copied: sealed for no location identity, but {bound}"):
        open_storage(bound, keyring=parse_keyring(K1)).get("b1/copied")


@pytest.mark.parametrize("marker", [b"not json", b'{"format": "other"}', b'{"format": "rbak-encryption-v1", '
                                                                         b'"location_id": "../x"}', b"{" * 70000])
def test_a_marker_that_is_not_one_stops_reads_and_writes_naming_the_location(marker):
    url = _url()
    open_storage(url, keyring=parse_keyring(K1)).put(OBJECT, b"x")
    _raw(url).put(MARKER_KEY, marker)

    storage = open_storage(url, keyring=parse_keyring(K1))

    for act in (lambda: storage.get(OBJECT), lambda: storage.put("b1/other", b"y")):
        with pytest.raises(BadMarkerError, match=f"{url}: its encryption marker {MARKER_KEY} is not one"):
            act()
    assert sorted(i.key for i in _raw(url).list()) == sorted([MARKER_KEY, OBJECT])


# --- the retired-key rule ---


def _retired_location() -> tuple[str, str]:
    """A location where k1 sealed two objects, then k2 took over and sealed one, and k1 was retired."""
    url = _url()
    old = open_storage(url, keyring=parse_keyring(K1))
    old.put("b1/a", b"sealed by k1")
    old.put("b1/b", b"sealed by k1 too")
    new = open_storage(url, keyring=parse_keyring(f"{K2},{K1}"))
    new.put("b2/c", b"sealed by k2")
    done = retire_key(new, "k1")
    assert (done.pinned, done.refused, done.record) == (2, {}, retirement_key("k1"))
    return url, f"{K2},{K1}:retired"


def test_a_retired_key_still_opens_what_it_sealed_before_it_was_retired():
    url, retired = _retired_location()

    storage = open_storage(url, keyring=parse_keyring(retired))

    assert [storage.get(k) for k in ("b1/a", "b1/b", "b2/c")] == [b"sealed by k1", b"sealed by k1 too", b"sealed by k2"]
    assert parse_keyring(retired).retired == {"k1"} and parse_keyring(parse_keyring(retired).to_text()).retired == {"k1"}


def test_a_leaked_retired_key_can_forge_nothing_new_nor_replace_an_object_nor_its_record():
    # Given k1 retired, and someone holding only k1, sealing for this location as this tool would
    url, retired = _retired_location()
    leaked = open_storage(url, keyring=parse_keyring(K1))
    leaked.put("b3/manifest.json", b"forged")  # a new object
    leaked.put("b1/b", b"replaced")  # an object k1 did seal, replaced

    reader = open_storage(url, keyring=parse_keyring(retired))

    # Then each is refused, naming it; what k1 sealed before still opens
    with pytest.raises(UnpinnedObjectError, match=r"b3/manifest.json: sealed with the retired key 'k1' but not as "
                                                  r"its retirement pinned it .*not listed"):
        reader.get("b3/manifest.json")
    with pytest.raises(UnpinnedObjectError, match=r"b1/b: .*SHA-256 [0-9a-f]{64}, pinned [0-9a-f]{64}"):
        reader.get("b1/b")
    assert reader.get("b1/a") == b"sealed by k1"
    # and while k1 is only rotated out (not retired), the forgery opens: rotation is not revocation
    assert open_storage(url, keyring=parse_keyring(f"{K2},{K1}")).get("b3/manifest.json") == b"forged"
    # and a record sealed with k1 itself, pinning the forgery, is refused: k1 then opens nothing
    _raw(url).delete(retirement_key("k1"))
    leaked.put(retirement_key("k1"), b"{}")
    with pytest.raises(UnpinnedObjectError, match="sealed with the key it retires"):
        open_storage(url, keyring=parse_keyring(retired)).get("b1/a")


def test_a_retired_key_without_its_record_opens_nothing_and_what_cannot_be_retired_is_refused():
    url, retired = _retired_location()
    _raw(url).delete(retirement_key("k1"))

    with pytest.raises(UnpinnedObjectError, match="holds no retirement record"):
        open_storage(url, keyring=parse_keyring(retired)).get("b1/a")
    assert open_storage(url, keyring=parse_keyring(retired)).get("b2/c") == b"sealed by k2"
    with pytest.raises(ConfigurationError, match="writes .* cannot be retired"):
        parse_keyring(f"{K1}:retired,{K2}")
    with pytest.raises(ConfigurationError, match="it is the writing key"):
        retire_key(open_storage(url, keyring=parse_keyring(f"{K2},{K1}")), "k2")
    legacy = _url()
    _raw(legacy).put(MARKER_KEY, LEGACY_MARKER)
    with pytest.raises(ConfigurationError, match="the location has no identity"):
        retire_key(open_storage(legacy, keyring=parse_keyring(f"{K2},{K1}")), "k1")
