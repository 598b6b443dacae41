"""Writes a one-layer OCI image archive from local files, for `ctr images import` (no Docker, no registry).

    python3 scripts/lib/oci_image.py OUT.tar NAME:TAG --add SRC:/DEST [--add ...] --entrypoint /DEST [ARG ...]
    python3 scripts/lib/oci_image.py OUT.tar NAME:TAG --layer-tar ROOTFS.tar --user 0:0 --entrypoint /DEST [ARG ...]

The cluster's own images are built this way by scripts/install-cluster: the pause container (a static binary
needs no base image) and Chaos Mesh's daemon (a debootstrapped root filesystem, tarred, as the one layer).
Standard library only; the layer is deterministic (sorted entries, zero mtimes, root-owned).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest.split(':')[1]}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return digest


def _layer(files: list[tuple[Path, str]]) -> tuple[bytes, str]:
    """The layer's gzip bytes and its diff id (the digest of the uncompressed tar)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for src, dest in sorted(files, key=lambda f: f[1]):
            info = t.gettarinfo(str(src), arcname=dest.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            with open(src, "rb") as f:
                t.addfile(info, f)
    data = raw.getvalue()
    return gzip.compress(data, mtime=0), "sha256:" + hashlib.sha256(data).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("ref", help="the image's name:tag")
    ap.add_argument("--add", action="append", default=[], metavar="SRC:/DEST")
    ap.add_argument(
        "--layer-tar", type=Path, help="a tar of a whole root filesystem: the layer (instead of --add)"
    )
    ap.add_argument("--user", default="65535:65535", help="uid:gid the entrypoint runs as (default: nobody)")
    ap.add_argument("--entrypoint", nargs="+", required=True)
    args = ap.parse_args()
    if args.layer_tar and args.add:
        ap.error("--layer-tar is the whole layer: no --add beside it")
    if args.layer_tar:
        data = args.layer_tar.read_bytes()
        layer, diff_id = (
            gzip.compress(data, compresslevel=1, mtime=0),
            "sha256:" + hashlib.sha256(data).hexdigest(),
        )
    else:
        layer, diff_id = _layer([(Path(a.split(":", 1)[0]), a.split(":", 1)[1]) for a in args.add])
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": args.entrypoint, "User": args.user},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    with tarfile.open(args.out, "w") as tar:
        cfg = json.dumps(config, sort_keys=True).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _blob(tar, cfg),
                "size": len(cfg),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _blob(tar, layer),
                    "size": len(layer),
                }
            ],
        }
        m = json.dumps(manifest, sort_keys=True).encode()
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _blob(tar, m),
                    "size": len(m),
                    "annotations": {"org.opencontainers.image.ref.name": args.ref},
                }
            ],
        }
        for name, data in (
            ("index.json", json.dumps(index).encode()),
            ("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
