#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
# kubelet from Go modules into a versioned cache directory outside the
# checkout, and prints that directory. Skips the build when every binary is
# already there; builds only the missing ones, in one `go build` so that their
# compiles and links overlap.
#
#   STICKYDRAIN_CACHE   cache root (default: $XDG_CACHE_HOME or $HOME/.cache, /stickydrain)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8s_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$here/go.mod")"
cache_root="${STICKYDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stickydrain}"
dir="$cache_root/k8s-${k8s_version}-etcd-${etcd_version}"

bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)
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

declare -A pkg=(
	[etcd]=go.etcd.io/etcd/server/v3
	[kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
	[kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
	[kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
	[kubelet]=k8s.io/kubernetes/cmd/kubelet
)
cd "$here"
echo "building ${missing[*]} into $dir; a cold build of all five takes about 20 minutes on 2 cores" >&2
start=$SECONDS
pkgs=()
for b in "${missing[@]}"; do
	pkgs+=("${pkg[$b]}")
done
# One go build for all of them: their shared packages compile once and the
# links overlap. go build -o DIR/ names each binary after its package's last
# path element without a major version: etcd's comes out as "server".
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/" "${pkgs[@]}"
[[ ! -e "$tmp/server" ]] || mv "$tmp/server" "$tmp/etcd"
for b in "${missing[@]}"; do
	# rename is atomic: an interrupted build never leaves a half-written binary behind
	mv "$tmp/$b" "$dir/$b"
done
echo "built ${missing[*]} in $((SECONDS - start))s" >&2
echo "$dir"
