"""A plain copy of a location: every object read through its decorators and written as it reads.

``rbak export --decrypt`` opens the source with its keys and the target without any, so the target holds the RBAK
bytes exactly as a plain location does, readable by any RBAK v1 reader. Each object is authenticated as it is read;
one that fails is named and left out, and the rest are still copied (a damaged object never hides good ones). The
target must be empty, so the copy holds the source's objects and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.storage.base import ObjectNotFoundError, Storage, StorageError, TransientStorageError
from airflow_rbak.storage.encrypted import KeyRequiredError


@dataclass
class ExportResult:
    """What an export copied, and each object it could not (key: why)."""

    source: str
    target: str
    objects: int = 0
    bytes: int = 0
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether every object was copied."""
        return not self.refused

    def to_json(self) -> dict[str, object]:
        """A JSON-serialisable summary."""
        return {"source": self.source, "target": self.target, "objects": self.objects, "bytes": self.bytes,
                "refused": self.refused, "ok": self.ok}


def export_location(source: Storage, target: Storage) -> ExportResult:
    """Copy every object of ``source`` to the empty ``target``, each as ``source`` reads it.

    A transient failure that outlasts the retries stops the export (run it again on an emptied target); an object
    that cannot be opened (damaged, wrong key) is recorded in ``refused`` and the copy goes on.
    """
    source.check_location()
    present = next(iter(target.list()), None)
    if present is not None:
        raise ConfigurationError(f"{target.url} is not empty ({present.key}, ...): export into an empty location")
    result = ExportResult(source.url, target.url)
    for info in source.list():
        try:
            data = source.get(info.key)
        except ObjectNotFoundError:
            continue  # removed since the listing (retention): nothing to copy
        except (TransientStorageError, KeyRequiredError):
            raise  # a passing failure, or no key at all: nothing would be copied, say so once
        except StorageError as error:
            result.refused[info.key] = str(error)
            continue
        target.put(info.key, data)
        result.objects += 1
        result.bytes += len(data)
    return result
