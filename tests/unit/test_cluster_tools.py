"""The pieces scripts/install-cluster builds the real cluster's tools image from: Chaos Mesh's nsexec interface
over nsenter (tools/cluster/chaos-daemon/nsexec) and one-layer OCI archives (scripts/lib/oci_image.py)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NSEXEC = ROOT / "tools" / "cluster" / "chaos-daemon" / "nsexec"


def _nsexec(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(NSEXEC), *args], capture_output=True, text=True, timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="entering a namespace needs root")
def test_nsexec_runs_the_command_in_the_named_network_namespace() -> None:
    """Chaos Mesh's daemon runs `nsexec -n /proc/PID/ns/net -- tc ...`: the command runs there, with its arguments."""
    own = os.readlink("/proc/self/ns/net")
    out = _nsexec(
        "-n", f"/proc/{os.getpid()}/ns/net", "--", "sh", "-c", 'readlink /proc/self/ns/net; echo "$1"', "-", "a b"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [own, "a b"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["-l", "-m", "/proc/1/ns/mnt", "--", "true"], "-l (local mount) is not supported"),
        (["-u", "/proc/1/ns/uts", "--", "true"], "unknown option -u"),
        (["-n", "/proc/1/ns/net"], "no command after --"),
    ],
)
def test_nsexec_refuses_what_it_cannot_do_by_name(args: list[str], says: str) -> None:
    """An option the shim does not implement fails loudly (exit 2) rather than running the command elsewhere."""
    out = _nsexec(*args)
    assert out.returncode == 2
    assert says in out.stderr


def test_a_root_filesystem_tar_is_the_images_one_layer(tmp_path: Path) -> None:
    """`--layer-tar`: the tar is the layer (gzipped), its digest the config's diff id, the user as given."""
    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w") as t:
        data = b"#!/bin/sh\necho hi\n"
        info = tarfile.TarInfo("usr/local/bin/hello")
        info.size, info.mode = len(data), 0o755
        t.addfile(info, io.BytesIO(data))
    out = tmp_path / "image.tar"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/lib/oci_image.py"),
            str(out),
            "docker.io/x/tools:1",
            "--layer-tar",
            str(rootfs),
            "--user",
            "0:0",
            "--entrypoint",
            "/usr/local/bin/hello",
        ],
        check=True,
    )
    with tarfile.open(out) as t:

        def read(member: tarfile.TarInfo | str) -> bytes:
            f = t.extractfile(member)
            assert f is not None
            return f.read()

        blobs = {m.name.split("/")[-1]: read(m) for m in t.getmembers() if m.name.startswith("blobs/")}
        index = json.loads(read("index.json"))
    manifest = json.loads(blobs[index["manifests"][0]["digest"].split(":")[1]])
    config = json.loads(blobs[manifest["config"]["digest"].split(":")[1]])
    layer = blobs[manifest["layers"][0]["digest"].split(":")[1]]
    assert gzip.decompress(layer) == rootfs.read_bytes()
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(rootfs.read_bytes()).hexdigest()]
    assert config["config"] == {"Entrypoint": ["/usr/local/bin/hello"], "User": "0:0"}
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "docker.io/x/tools:1"


def test_layer_tar_and_added_files_are_not_mixed(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/lib/oci_image.py"),
            str(tmp_path / "o.tar"),
            "x:1",
            "--layer-tar",
            str(tmp_path / "r.tar"),
            "--add",
            f"{NSEXEC}:/nsexec",
            "--entrypoint",
            "/nsexec",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "no --add beside it" in out.stderr
