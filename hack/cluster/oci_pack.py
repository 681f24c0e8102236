#!/usr/bin/env python3
"""Pack one static binary as a single-layer OCI image archive that `ctr images import` accepts.

Used for the pause (sandbox) image of the real node: no registry is reachable here, so every image a
pod uses is imported from a file. The archive is deterministic (fixed mtimes, sorted entries): the same
binary gives the same digest, so a warm import is a no-op.

    oci_pack.py --binary pause --path /pause --entrypoint /pause --user 65535:65535 --ref NAME:TAG -o out.tar
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile


def _blob(tar: tarfile.TarFile, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    _add(tar, f"blobs/sha256/{digest}", data)
    return f"sha256:{digest}", len(data)


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def layer_tar(binary: bytes, path: str, links: tuple[str, ...] = ()) -> bytes:
    """An uncompressed layer holding `binary` at `path` (mode 0755, root-owned, mtime 0), plus symlinks to it
    beside it named `links` (busybox applets: `sh`, `nslookup`, ... run busybox by their name)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        _add(layer, path.lstrip("/"), binary, mode=0o755)
        # "/pause" has no parent directory in the layer; "/bin/busybox" has "bin"
        parent, _, base = path.lstrip("/").rpartition("/")
        for name in sorted(set(links) - {base}):
            info = tarfile.TarInfo(f"{parent}/{name}" if parent else name)
            info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, base, 0o777, 0
            layer.addfile(info)
    return buf.getvalue()


def pack(binary: bytes, *, path: str, entrypoint: list[str], user: str, ref: str, out: str,
         links: tuple[str, ...] = ()) -> str:
    """Write the archive; return the manifest digest."""
    layer = layer_tar(binary, path, links)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "User": user, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    with tarfile.open(out, "w") as tar:
        cfg_digest, cfg_size = _blob(tar, json.dumps(config, sort_keys=True).encode())
        layer_digest, layer_size = _blob(tar, layer)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": cfg_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer_size}],
        }
        man_digest, man_size = _blob(tar, json.dumps(manifest, sort_keys=True).encode())
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": man_digest, "size": man_size,
                "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[-1]},
            }],
        }
        _add(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        _add(tar, "index.json", json.dumps(index, sort_keys=True).encode())
    return man_digest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--path", required=True, help="where the binary lives in the image")
    p.add_argument("--entrypoint", required=True)
    p.add_argument("--user", default="65535:65535")
    p.add_argument("--ref", required=True, help="image name the import registers (io.containerd.image.name)")
    p.add_argument("--links", default="", help="comma-separated names to symlink to the binary in its directory")
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args()
    with open(a.binary, "rb") as f:
        digest = pack(f.read(), path=a.path, entrypoint=[a.entrypoint], user=a.user, ref=a.ref, out=a.output,
                      links=tuple(x for x in a.links.split(",") if x))
    print(f"{a.ref} {digest} -> {a.output}")


if __name__ == "__main__":
    main()
