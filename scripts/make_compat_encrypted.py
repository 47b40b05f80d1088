"""Seal the compatibility backup into an encrypted location as the first encrypted version wrote one.

Run once, with the code of that version (envelope version 1, a marker without a location identity):

    python scripts/make_compat_encrypted.py tests/compat/backups/v1/location tests/compat/backups/encrypted-v1

Every object of the plain location is stored through ``EncryptedStorage`` under the fixed test key
:data:`COMPAT_KEYS` (public, never a real key), so ``OUT/location`` holds what a keyed ``rbak_backup`` of that
version left: the marker, then each object in its envelope. Never regenerate it: it is what later versions must read.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_rbak.storage import open_storage  # noqa: E402
from airflow_rbak.storage.keyring import parse_keyring  # noqa: E402

#: The compatibility location's key: 32 bytes 0x00..0x1f under the id ``compat-1`` (public: a test key).
COMPAT_KEYS = "compat-1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="


def main(source: str, out: str) -> None:
    plain = open_storage(Path(source).resolve().as_uri(), keyring=None)
    sealed = open_storage((Path(out).resolve() / "location").as_uri(), keyring=parse_keyring(COMPAT_KEYS))
    for info in plain.list():
        sealed.put(info.key, plain.get(info.key))


if __name__ == "__main__":
    main(*sys.argv[1:3])
