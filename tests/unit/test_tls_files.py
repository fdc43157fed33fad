"""The self-signed certificate `gpufleet server --ssl` makes is put in place whole: a worker
or client that reads it while the server starts (`--ca-cert` on this file) never finds it
empty or cut (a test's client once read it empty: `NO_CERTIFICATE_OR_CRL_FOUND`)."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.server import tls


def test_the_certificate_replaces_the_file_instead_of_rewriting_it(tmp_path: Path) -> None:
    folder = tmp_path / "tls"
    folder.mkdir()
    (folder / "cert.pem").write_text("a reader holds this file open\n")
    reader_view = tmp_path / "what-a-reader-has-open"
    os.link(folder / "cert.pem", reader_view)  # the same file, as an open reader sees it

    made = tls.prepare(tmp_path, "127.0.0.1", None, None)  # no key: both are made anew

    assert made.created
    assert reader_view.read_text() == "a reader holds this file open\n"  # not truncated under it
    assert made.cert.read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert sorted(p.name for p in folder.iterdir()) == ["cert.pem", "key.pem"]  # no temporary
