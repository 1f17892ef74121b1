#!/usr/bin/env bash
# Builds containerd, containerd-shim-runc-v2 and ctr from containerd's Go
# module (pinned in containerd/go.mod) into a versioned cache directory outside
# the checkout, and prints that directory. Skips the build when all three are
# there. runc and the CNI plugins are Debian's (test/deps.sh installs them):
# runc builds only with cgo and libseccomp, and Debian's 1.1.5 runs under
# containerd 2.x (docs/development.md, "The real node").
#
#   STICKYDRAIN_CACHE   cache root (default: $XDG_CACHE_HOME or $HOME/.cache, /stickydrain)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/containerd" && pwd)"
version="$(cd "$here" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
cache_root="${STICKYDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stickydrain}"
dir="$cache_root/containerd-${version}"

bins=(containerd containerd-shim-runc-v2 ctr)
missing=()
for b in "${bins[@]}"; do
	[[ -x "$dir/$b" ]] || missing+=("$b")
done
if ((${#missing[@]} == 0)); then
	echo "$dir"
	exit 0
fi

mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
pkgs=()
for b in "${missing[@]}"; do
	pkgs+=("github.com/containerd/containerd/v2/cmd/$b")
done
echo "building ${missing[*]} (containerd $version) into $dir; about 2 minutes cold on 2 cores" >&2
start=$SECONDS
cd "$here"
# Static, without the snapshotters that need cgo or kernel modules here.
CGO_ENABLED=0 go build -trimpath -tags 'no_btrfs no_devmapper no_zfs' -ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$version" -o "$tmp/" "${pkgs[@]}"
for b in "${missing[@]}"; do
	mv "$tmp/$b" "$dir/$b"
done
echo "built ${missing[*]} in $((SECONDS - start))s" >&2
echo "$dir"
