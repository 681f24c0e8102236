#!/usr/bin/env bash
# The CPU image's base: a Debian root filesystem from Debian's own mirror (mmdebstrap), committed into our
# private buildah storage as a local image. No registry is reachable here, so there is no FROM to pull.
#   hack/image/base.sh     -> prints the local image name (localhost/grpo-launcher/debian-base:<suite>-<key>)
# Cached by its inputs (suite, mirrors, packages, this script): the rootfs tarball under
# $GRPO_CACHE/images/base/ and the image in buildah's storage. The key has no date: to pick up newer Debian
# security updates, delete the tarball (or change an input).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"
write_buildah_config

key=$( { echo "$SUITE $MIRROR $SECURITY_MIRROR $BASE_PACKAGES"; cat "$HERE/base.sh"; } | sha256sum | cut -c1-12)
name="localhost/grpo-launcher/debian-base:$SUITE-$key"
tarball="$IMAGE_CACHE/base/debian-$SUITE-$key.tar"

if buildah inspect --type image "$name" >/dev/null 2>&1; then echo "$name"; exit 0; fi
lock base
if buildah inspect --type image "$name" >/dev/null 2>&1; then echo "$name"; exit 0; fi

if [ ! -f "$tarball" ]; then
  say "mmdebstrap --variant=minbase $SUITE (+ $BASE_PACKAGES)"
  mkdir -p "$(dirname "$tarball")"
  # dpkg path-exclude: no man pages, info, docs (copyright files kept) or translations: about 45 MB less.
  # The hook empties the build host's resolv.conf/hostname that mmdebstrap leaves in (runtimes mount their own).
  mmdebstrap --variant=minbase --include="$BASE_PACKAGES" --format=tar \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook='truncate -s 0 "$1/etc/resolv.conf" "$1/etc/hostname"' \
    "$SUITE" "$tarball.tmp" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY_MIRROR $SUITE-security main"
  mv "$tarball.tmp" "$tarball"
  # Tarballs of earlier inputs are dead weight (180 MB each).
  find "$(dirname "$tarball")" -maxdepth 1 -name "debian-$SUITE-*.tar" ! -name "$(basename "$tarball")" -delete
fi

say "importing $tarball as $name"
ctr=$(buildah from --signature-policy "$POLICY" scratch)
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah add "$ctr" "$tarball" / >/dev/null          # a local tarball is unpacked, as Dockerfile ADD does
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash \
  --label org.opencontainers.image.title="Debian $SUITE minbase (mmdebstrap) for grpo-launcher" "$ctr"
buildah commit --signature-policy "$POLICY" --rm "$ctr" "$name" >/dev/null
trap - EXIT
echo "$name"
