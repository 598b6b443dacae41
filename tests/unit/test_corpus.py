"""The pinned real-text corpus (trainer.corpus): the same bytes on every machine, or a clear refusal."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from trainer import corpus


def test_the_fetched_corpus_is_the_pinned_bytes() -> None:
    """scripts/setup fetched it: its size and checksum are the pinned ones, and it is English text."""
    data = corpus.load()
    assert len(data) == corpus.CORPUS_BYTES
    assert hashlib.sha256(data).hexdigest() == corpus.CORPUS_SHA256
    assert b"\r" not in data and b"Alice" in data and b"Paradise" in data
    assert data.isascii()


def _archive(tmp_path: Path, tamper: str | None = None) -> Path:
    """A copy of the pinned archive's four texts in a tar.gz of the same layout (``tamper``: one byte changed)."""
    texts = corpus.load_texts()
    path = tmp_path / corpus.ARCHIVE
    with tarfile.open(path, "w:gz") as tar:
        for name, data in texts.items():
            if name == tamper:
                data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
            info = tarfile.TarInfo(corpus.MEMBER_DIR + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_changed_file_is_refused_by_name(tmp_path: Path) -> None:
    good = tmp_path / "good"
    for name, data in corpus.load_texts().items():
        good.mkdir(exist_ok=True)
        (good / name).write_bytes(data)
    assert corpus.load(good) == corpus.load()
    text = good / "alice29.txt"
    data = text.read_bytes()
    text.write_bytes(data[:10] + b"X" + data[11:])  # the planted defect: one byte of one text
    with pytest.raises(corpus.CorpusError, match=r"alice29.txt: SHA-256 .* not the pinned"):
        corpus.load(good)


def test_a_missing_corpus_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(corpus.CorpusError, match=r"python -m trainer.corpus fetch.*DILOCO_CORPUS_DIR"):
        corpus.load(tmp_path)


def test_fetch_checks_the_archive_before_extracting(tmp_path: Path) -> None:
    """Our re-packed archive is not the pinned one (its SHA-256 differs): refused, nothing written."""
    out = tmp_path / "out"
    with pytest.raises(corpus.CorpusError, match=corpus.ARCHIVE):
        corpus.fetch(out, archive=_archive(tmp_path))
    assert not out.exists() or not any(out.iterdir())


def test_fetch_checks_each_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive that passes its own check but holds a changed text: that text is refused by name."""
    archive = _archive(tmp_path, tamper="lcet10.txt")
    monkeypatch.setattr(corpus, "ARCHIVE_SHA256", hashlib.sha256(archive.read_bytes()).hexdigest())
    with pytest.raises(corpus.CorpusError, match=r"lcet10.txt: SHA-256"):
        corpus.fetch(tmp_path / "out", archive=archive)


def test_fetch_extracts_the_pinned_texts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _archive(tmp_path)
    monkeypatch.setattr(corpus, "ARCHIVE_SHA256", hashlib.sha256(archive.read_bytes()).hexdigest())
    out = corpus.fetch(tmp_path / "out", archive=archive)
    assert corpus.load(out) == corpus.load()
    assert sorted(p.name for p in out.iterdir()) == sorted(t.name for t in corpus.TEXTS)  # no .part left
