#!/usr/bin/env bash
# Debian packages the real node needs (containerd 1.6, runc, the CNI plugins in /usr/lib/cni, iptables), plus
# any named on the command line (`make image-cpu`: buildah skopeo mmdebstrap), installed only when missing. They are not started as services: node.sh runs them with private state.
# Usage: hack/cluster/install-node-deps.sh [extra packages...]
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins iptables iproute2 "$@")  # iproute2: ss (node.sh)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then echo "missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2; exit 1; fi
echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d: installing containerd must not start the distribution's own service (and its /run/containerd)
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
  { apt-get update -q >/dev/null && apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
