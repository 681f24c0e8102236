#!/usr/bin/env bash
# Import the CPU image's OCI layout (hack/image/build.sh) into a containerd (namespace k8s.io, where the kubelet's CRI
# looks).
#   hack/image/import.sh [ADDRESS]      ADDRESS defaults to real node 0: $GRPO_CLUSTER_DIR/nodes/0/containerd.sock
# Skipped when that containerd already has the image name pointing at the layout's manifest digest, unpacked. Otherwise only
# the layers the containerd has not unpacked yet travel (layout.py files): after a change under src/, the launcher's
# own layer, not 6 GB.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

CLUSTER_DIR=${GRPO_CLUSTER_DIR:-$GRPO_CACHE/cluster}
ADDRESS=${1:-$CLUSTER_DIR/nodes/0/containerd.sock}
NS=k8s.io
[ -f "$LAYOUT/index.json" ] || { say "no image layout $LAYOUT: run \`make image-cpu\` first"; exit 2; }
ctrc() { ctr --address "$ADDRESS" -n "$NS" "$@"; }

# The CRI names every image it has seen by its config digest too (sha256:...); the previous build keeps that
# name after the tag moves on, which pins its 6 GB layer (content and unpacked snapshot) for good. Remove such
# names when no tagged image shares their manifest; containerd's garbage collector then frees the space.
prune_superseded() {
  local stale
  stale=$(ctrc images ls | awk 'NR > 1 && $1 !~ /^sha256:/ { keep[$3] = 1 }
    NR > 1 && $1 ~ /^sha256:/ { ids[$1] = $3 } END { for (i in ids) if (!(ids[i] in keep)) print i }')
  [ -n "$stale" ] || return 0
  # shellcheck disable=SC2086  # one argument per stale name
  ctrc images rm --sync $stale >/dev/null
  say "removed $(echo "$stale" | wc -w) superseded image name(s) from $ADDRESS"
}

# Once the image is unpacked, the kubelet's CRI runs containers from the snapshots alone: the layer blobs in the
# content store are a second 6 GB copy per node (what containerd's discard_unpacked_layers does for CRI pulls, which
# `ctr images import` does not do). Drop the manifest's references to its layers, then the layers themselves; the
# manifest, config and the config's reference to the unpacked snapshot stay, so the image and its snapshots are
# kept. (`ctr images check` reports such an image "incomplete"; a re-import restores the blobs.)
discard_layers() {
  local manifest=$1 content labels refs config others digests
  content=$(ctrc content ls)
  labels=$(awk -v m="$manifest" '$1 == m { print $NF }' <<<"$content" | tr ',' '\n')
  refs=$(grep '^containerd.io/gc.ref.content.l\.' <<<"$labels") || return 0
  # the config must point at its unpacked snapshot, or the layers are all there is
  config=$(sed -n 's/^containerd.io\/gc.ref.content.config=//p' <<<"$labels")
  awk -v c="$config" '$1 == c && $NF ~ /containerd.io\/gc.ref.snapshot\./' <<<"$content" | grep -q . || return 0
  # a layer another image still references (the same base) stays
  others=$(awk -v m="$manifest" '$1 != m { print $NF }' <<<"$content" | tr ',' '\n' \
    | grep '^containerd.io/gc.ref.content.l\.' | cut -d= -f2 || true)
  digests=$(cut -d= -f2 <<<"$refs" | grep -vxF -f <(echo "${others:-none}") || true)
  # shellcheck disable=SC2046  # one argument per label
  ctrc content label "$manifest" $(sed 's/=.*/=/' <<<"$refs") >/dev/null
  # shellcheck disable=SC2086  # one argument per digest
  [ -z "$digests" ] || ctrc content rm $digests >/dev/null
  say "discarded $(wc -w <<<"$digests") unpacked layer blob(s) of $manifest from $ADDRESS"
}

read -r want ref < <(python3 "$HERE/layout.py" ref "$LAYOUT")
[ -n "$ref" ] || ref=$IMAGE_REF
top=$(python3 "$HERE/layout.py" top "$LAYOUT")
# unpacked = the top layer's snapshot exists (what the CRI checks before it runs a container from the image)
unpacked() { ctrc snapshots info "$top" >/dev/null 2>&1; }
have=$(ctrc images ls 2>/dev/null | awk -v r="$ref" '$1 == r { print $3 }')
if [ "$have" = "$want" ] && unpacked; then
  say "$ref already in $ADDRESS ($NS) at $want"
  prune_superseded
  discard_layers "$want"
  exit 0
fi
# A tar of the layout without the layers this containerd has unpacked already: its unpacker skips a layer whose
# chain ID has a snapshot and never asks for the blob. ctr takes the name from the ref.name annotation and unpacks
# into the default snapshotter (overlayfs), which the CRI then uses as is; the CRI adds its own sha256:<config> name.
# (--digests would add an "import-<date>@sha256:..." name as well: clutter.)
# Once `ctr images import` moves the name to the new manifest, nothing references the previous image's snapshots
# until the new one is unpacked (its unpack lease covers only what it creates): a garbage collection in that window
# (containerd runs one after any deletion) takes them, base layers included, whose blobs were discarded at the last
# import, so the unpack fails with "failed to extract layer ... content digest not found" (CI, 2026-12-06; with a
# collection looping beside it, 21 of 80 re-imports failed so). A second name holds the previous image until the
# import is done.
keep="$ref-import-keep"
snaps=$(mktemp) files=$(mktemp)
trap 'rm -f "$snaps" "$files"; ctrc images rm "$keep" >/dev/null 2>&1 || true' EXIT
[ -z "$have" ] || ctrc images tag --force "$ref" "$keep" >/dev/null
import_layout() {  # $1: a file of the snapshot keys whose layers need not travel
  python3 "$HERE/layout.py" files "$LAYOUT" "$1" >"$files"
  say "importing $ref ($want) into $ADDRESS ($NS): $(grep -c '^blobs/' "$files") blob(s), $(cd "$LAYOUT" && xargs -a "$files" du -cb | tail -1 | awk '{ printf "%.1f MB", $1 / 1e6 }')"
  tar -C "$LAYOUT" -cf - -T "$files" | ctrc images import -
}
ctrc snapshots ls | awk 'NR > 1 { print $1 }' >"$snaps"
# A snapshot no image holds (the keep name holds only the previous image's) can still go before the unpack reaches
# it, and the name can end at the new manifest without its top snapshot (seen once, s7). Either way import every
# blob once more (the unpacker then has what it needs), and prune only an image that is unpacked.
if ! import_layout "$snaps" || ! unpacked; then
  say "$ref is not unpacked in $ADDRESS after the import: importing every layer"
  import_layout /dev/null
fi
have=$(ctrc images ls | awk -v r="$ref" '$1 == r { print $3 }')
[ "$have" = "$want" ] || { say "import did not yield $ref at $want (got '${have:-nothing}')"; exit 1; }
unpacked || { say "$ref at $want is still not unpacked in $ADDRESS (no snapshot $top)"; exit 1; }
say "imported $ref"
ctrc images rm "$keep" >/dev/null 2>&1 || true
prune_superseded
discard_layers "$want"
