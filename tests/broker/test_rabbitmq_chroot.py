"""The Debian mirror a RabbitMQ 4.x chroot is made from is the one the host's apt sources name, never a fixed host."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rabbitmq-chroot.sh"


def mirror(apt: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), "mirror"], capture_output=True, text=True, timeout=30,
                          env={**{k: v for k, v in os.environ.items() if k != "RBAK_DEBIAN_MIRROR"}, "RBAK_APT_DIR": str(apt), **env})


def test_the_first_deb822_stanza_that_is_not_the_security_archive(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\nTypes: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n")

    assert mirror(tmp_path).stdout.strip() == "http://mirror.example/debian"


def test_a_one_line_sources_list_with_options(tmp_path):
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb http://security.example/debian-security bookworm-security main\n"
        "deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.example/debian bookworm main\n")

    assert mirror(tmp_path).stdout.strip() == "http://mirror.example/debian"


@pytest.mark.parametrize("override", ["", "http://chosen.example/debian"])
def test_no_sources_is_an_error_unless_a_mirror_is_given(tmp_path, override):
    done = mirror(tmp_path, RBAK_DEBIAN_MIRROR=override)

    if override:
        assert done.stdout.strip() == override
    else:
        assert done.returncode != 0 and "set RBAK_DEBIAN_MIRROR" in done.stderr
