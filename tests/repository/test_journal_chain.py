"""A vhost's journal archives as one chain: ordered, links and ranges checked, every hole a gap with its time range,
one bad manifest never hiding the others (the archives written by the archive contract's test writer)."""

from __future__ import annotations

from airflow_rbak.codec.journal_layout import vhost_tag
from airflow_rbak.repository.journal_chain import journal_chain
from airflow_rbak.storage import open_storage
from tests.restore.journal_archives import ArchiveSpec, write_archive

T0 = 1_795_953_600_000


def _spec(start: int, end: int, gaps=()) -> ArchiveSpec:
    return ArchiveSpec(T0 + start, T0 + end, [], gaps=list(gaps))


def test_a_whole_chain_covers_its_range_without_gaps_and_answers_which_archives_cover_a_window(tmp_path):
    url = (tmp_path / "b").as_uri()
    a = write_archive(url, "prod", _spec(0, 100), None)
    b = write_archive(url, "prod", _spec(100, 200), a)
    c = write_archive(url, "prod", _spec(200, 300), b)
    write_archive(url, "other", _spec(0, 1000), None)  # another vhost's chain: not this one's

    chain = journal_chain(open_storage(url), "prod")

    assert [x.backup_id for x in chain.archives] == [a, b, c] and chain.gaps == () and chain.refused == ()
    assert chain.coverage == (T0, T0 + 300)
    assert [x.backup_id for x in chain.covering(T0 + 150, T0 + 250)] == [b, c]
    assert [x.backup_id for x in chain.covering(T0 + 100, T0 + 200)] == [b]


def test_an_archives_own_gaps_a_missing_link_and_a_damaged_manifest_are_gaps_with_their_ranges(tmp_path):
    url = (tmp_path / "b").as_uri()
    storage = open_storage(url)
    a = write_archive(url, "prod", _spec(0, 100, [{"from": T0 + 10, "to": T0 + 20, "reason": "tracing off on n2"},
                                                  {"from": T0 + 90, "to": None, "reason": "tracing unverified"}]), None)
    b = write_archive(url, "prod", _spec(100, 200), a)
    c = write_archive(url, "prod", _spec(200, 300), b)
    d = write_archive(url, "prod", _spec(300, 400), "journal-20261129T000000000000Z-" + vhost_tag("prod"))
    storage.put(f"{b}/manifest.json", b"{not json")  # damaged: refused, and its range is a gap

    chain = journal_chain(storage, "prod")

    assert [x.backup_id for x in chain.archives] == [a, c, d]
    assert dict(chain.refused)[b].startswith("manifest.json") or "JSON" in dict(chain.refused)[b]
    ranges = [(g.from_ms - T0, None if g.to_ms is None else g.to_ms - T0) for g in chain.gaps]
    assert ranges == [(10, 20), (90, 100), (100, 200), (300, 300)]
    assert "unreadable" in chain.gaps[2].reason and b in chain.gaps[2].reason
    assert "missing" in chain.gaps[3].reason
    assert [(g.from_ms - T0) for g in chain.gaps_in(T0 + 150, T0 + 350)] == [100, 300]
    assert chain.gaps_in(T0 + 20, T0 + 90) == []


def test_an_archive_naming_another_vhost_under_this_ones_tag_is_refused(tmp_path):
    url = (tmp_path / "b").as_uri()
    a = write_archive(url, "prod", _spec(0, 100), None)
    planted = write_archive(url, "prod", _spec(100, 200), a, journal={"vhost": "prod2"})

    chain = journal_chain(open_storage(url), "prod")

    assert [x.backup_id for x in chain.archives] == [a]
    assert "names vhost 'prod2'" in dict(chain.refused)[planted]
    assert chain.gaps[0].to_ms is None and planted in chain.gaps[0].reason  # what comes after is not covered
