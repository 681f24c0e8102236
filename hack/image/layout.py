"""The CPU image's OCI image layout directory (hack/image/build.sh writes it with `skopeo copy ... oci:DIR:REF`).

    layout.py ref DIR                  -> "<manifest digest> <ref name>" of the layout's (only) image
    layout.py prune DIR                -> drops index.json entries without a ref name (the image skopeo's copy of the
                                          same name superseded), then blobs that no manifest left references
    layout.py files DIR [SNAPSHOTS]    -> the paths (relative to DIR) a `tar | ctr images import -` needs
    layout.py top DIR                  -> the chain ID of the image's top layer: the snapshot an unpacked image has

A directory, not a tar, because skopeo reuses the blobs already in it: a change under src/ writes only the
launcher's own layer (a few MB) instead of the whole 6 GB image, and nothing is staged in $TMPDIR.

`files` leaves out every layer whose unpacked snapshot the target containerd already has (SNAPSHOTS: a file of
`ctr snapshots ls` keys, which for unpacked layers are their chain IDs): containerd's unpacker skips a layer whose
chain ID exists without reading its blob, so a re-import after a launcher change streams megabytes, not gigabytes.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

INDEX_TYPES = {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}


def _blob(root: Path, digest: str) -> Path:
    algo, hexdigest = digest.split(":", 1)
    return root / "blobs" / algo / hexdigest


def _json(root: Path, digest: str) -> dict:
    return json.loads(_blob(root, digest).read_text())


def manifests(root: Path) -> list[dict]:
    """The image manifests the layout's index.json reaches (nested indexes followed)."""
    out, todo = [], list(json.loads((root / "index.json").read_text())["manifests"])
    while todo:
        desc = todo.pop(0)
        if desc.get("mediaType") in INDEX_TYPES:
            todo += _json(root, desc["digest"])["manifests"]
        else:
            out.append(desc)
    return out


REF_NAME = "org.opencontainers.image.ref.name"


def drop_unnamed(root: Path) -> int:
    """Remove index.json entries without a ref name: `skopeo copy ... oci:DIR:REF` moves REF to the new image and
    leaves the superseded one in the index unnamed, where it would keep its blobs and be the first image found."""
    index = json.loads((root / "index.json").read_text())
    named = [d for d in index["manifests"] if d.get("annotations", {}).get(REF_NAME)]
    dropped = len(index["manifests"]) - len(named)
    if dropped:
        index["manifests"] = named
        (root / "index.json").write_text(json.dumps(index, separators=(",", ":")))
    return dropped


def referenced(root: Path) -> set[str]:
    """Every digest reachable from index.json: indexes, manifests, configs, layers."""
    seen: set[str] = set()
    for desc in manifests(root):
        doc = _json(root, desc["digest"])
        seen |= {desc["digest"], doc["config"]["digest"], *(d["digest"] for d in doc.get("layers", []))}
    todo = list(json.loads((root / "index.json").read_text())["manifests"])
    while todo:  # the indexes on the way (none in what skopeo writes here, but a layout may have them)
        desc = todo.pop()
        if desc.get("mediaType") in INDEX_TYPES:
            seen.add(desc["digest"])
            todo += _json(root, desc["digest"])["manifests"]
    return seen


def chain_ids(diff_ids: list[str]) -> list[str]:
    """OCI chain IDs: ChainID(L0) = DiffID(L0); ChainID(Ln) = sha256(ChainID(Ln-1) + " " + DiffID(Ln))."""
    chains: list[str] = []
    for diff in diff_ids:
        chains.append(diff if not chains else "sha256:" + hashlib.sha256(f"{chains[-1]} {diff}".encode()).hexdigest())
    return chains


def import_files(root: Path, snapshots: set[str]) -> list[str]:
    """oci-layout, index.json and every blob but the layers whose chain ID is in `snapshots`."""
    files = {"oci-layout", "index.json"}
    for desc in manifests(root):
        doc = _json(root, desc["digest"])
        diff_ids = _json(root, doc["config"]["digest"])["rootfs"]["diff_ids"]
        files |= {str(_blob(root, d["digest"]).relative_to(root)) for d in (desc, doc["config"])}
        for layer, chain in zip(doc["layers"], chain_ids(diff_ids)):
            if chain not in snapshots:
                files.add(str(_blob(root, layer["digest"]).relative_to(root)))
    return sorted(files)


def top_chain(root: Path) -> str:
    """The chain ID of the (first) image's top layer: the snapshot key containerd gives it once unpacked."""
    doc = _json(root, manifests(root)[0]["digest"])
    return chain_ids(_json(root, doc["config"]["digest"])["rootfs"]["diff_ids"])[-1]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("ref", "prune", "files", "top"):
        sys.exit(__doc__)
    root = Path(argv[1])
    if argv[0] == "ref":
        desc = manifests(root)[0]
        print(desc["digest"], desc.get("annotations", {}).get(REF_NAME, ""))
    elif argv[0] == "top":
        print(top_chain(root))
    elif argv[0] == "prune":
        drop_unnamed(root)
        keep = referenced(root)
        for blob in (root / "blobs").glob("*/*"):
            if f"{blob.parent.name}:{blob.name}" not in keep:
                blob.unlink()
    else:
        snapshots = set(Path(argv[2]).read_text().split()) if len(argv) > 2 else set()
        print("\n".join(import_files(root, snapshots)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
