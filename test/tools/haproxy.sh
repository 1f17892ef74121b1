#!/usr/bin/env bash
# Provides the HAProxy LTS versions the tests run against, in a versioned
# cache directory outside the checkout, and prints one line per version:
#
#   <series> <path to an executable haproxy>
#
# Skips everything already there. Usage: haproxy.sh [SERIES...] (default:
# 2.6 3.0 3.2).
#
#   2.6  Debian bookworm's package (test/deps.sh installs it).
#   3.0  the upstream tarball Debian trixie ships, checked against its
#        SHA-256 and built here with Lua 5.4, as distributions and the
#        official image build it (about 80 s on 2 cores).
#   3.2  Debian forky's binary package, patched (patchelf) to run with
#        forky's own loader and libraries (its sources are not served here).
#
#   STICKYDRAIN_CACHE   cache root (default: $XDG_CACHE_HOME or $HOME/.cache, /stickydrain)
set -euo pipefail

cache_root="${STICKYDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stickydrain}"
mirror="${STICKYDRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# Pinned: the release, its upstream tarball's SHA-256 (trixie's Sources).
v30=3.0.11
v30_sha256=a133e2d550c5fd9a849b5c7ab17bb945bcdad209ca140d41f45ebf31943ae783
# Pinned: forky's package version. Its libraries are taken at whatever
# version forky serves, checked against the SHA-256 in forky's index.
v32=3.2.26-1
v32_libs=(libc6 liblua5.4-0 libjemalloc2 libpcre2-8-0 libssl3t64 libcrypt1
	libopentracing-c-wrapper0t64 libopentracing1 libstdc++6 libgcc-s1 zlib1g libzstd1)

log() { echo "test/tools/haproxy.sh: $*" >&2; }

fetch() { # url sha256 out
	curl -fsSL --retry 3 -o "$3.part" "$1" || { log "downloading $1 failed"; return 1; }
	if [[ "$(sha256sum "$3.part" | cut -d' ' -f1)" != "$2" ]]; then
		log "$1: SHA-256 is not $2"
		rm -f "$3.part"
		return 1
	fi
	mv "$3.part" "$3"
}

# series BIN prints the HAProxy series BIN is (e.g. 2.6). No pipe: a grep
# or head that exits first kills `haproxy -v` with SIGPIPE, and pipefail
# then calls a good binary broken.
series() {
	local out
	out="$("$1" -v 2>&1)" || return 1
	[[ $out =~ HAProxy\ version\ ([0-9]+\.[0-9]+)\. ]] && echo "${BASH_REMATCH[1]}"
}

haproxy26() {
	local bin
	bin="$(command -v haproxy || true)"
	[[ -x /usr/sbin/haproxy ]] && bin=/usr/sbin/haproxy
	if [[ -z "$bin" ]] || [[ "$(series "$bin")" != 2.6 ]]; then
		log "Debian bookworm's haproxy 2.6 is not installed (make deps installs it)"
		return 1
	fi
	echo "2.6 $bin"
}

haproxy30() {
	local dir="$cache_root/haproxy-$v30-lua"
	if [[ ! -x "$dir/haproxy" ]]; then
		mkdir -p "$dir"
		local tmp start=$SECONDS
		tmp="$(mktemp -d "$dir/.build.XXXXXX")"
		log "building HAProxy $v30 from the upstream tarball into $dir (about 65 s)"
		fetch "$mirror/pool/main/h/haproxy/haproxy_$v30.orig.tar.gz" "$v30_sha256" "$tmp/src.tar.gz"
		tar -xzf "$tmp/src.tar.gz" -C "$tmp"
		make -s -C "$tmp/haproxy-$v30" -j"$(nproc)" TARGET=linux-glibc \
			USE_OPENSSL=1 USE_PCRE2=1 USE_ZLIB=1 USE_PROMEX=1 \
			USE_LUA=1 LUA_INC=/usr/include/lua5.4 LUA_LIB_NAME=lua5.4 >"$tmp/build.log" 2>&1 ||
			{ tail -30 "$tmp/build.log" >&2; rm -rf "$tmp"; return 1; }
		mv "$tmp/haproxy-$v30/haproxy" "$dir/haproxy"
		rm -rf "$tmp"
		log "built HAProxy $v30 in $((SECONDS - start))s"
	fi
	echo "3.0 $dir/haproxy"
}

# field PACKAGE FIELD < Packages: one field of one package's stanza.
field() {
	awk -v p="$1" -v f="$2:" '$1 == "Package:" {in_p = ($2 == p)} in_p && $1 == f {print $2; exit}'
}

haproxy32() {
	local dir="$cache_root/haproxy-${v32%-*}"
	if [[ ! -x "$dir/haproxy" ]]; then
		mkdir -p "$dir"
		local tmp start=$SECONDS
		tmp="$(mktemp -d "$dir/.build.XXXXXX")"
		log "fetching HAProxy $v32 and its libraries from Debian forky into $dir"
		curl -fsSL --retry 3 "$mirror/dists/forky/main/binary-amd64/Packages.xz" | xz -dc >"$tmp/Packages"
		local have
		have="$(field haproxy Version <"$tmp/Packages")"
		if [[ "$have" != "$v32" ]]; then
			log "forky serves haproxy $have, not the pinned $v32: update v32 in $0"
			rm -rf "$tmp"
			return 1
		fi
		mkdir -p "$tmp/root"
		local p
		for p in haproxy "${v32_libs[@]}"; do
			fetch "$mirror/$(field "$p" Filename <"$tmp/Packages")" "$(field "$p" SHA256 <"$tmp/Packages")" "$tmp/$p.deb" ||
				{ rm -rf "$tmp"; return 1; }
			dpkg-deb -x "$tmp/$p.deb" "$tmp/root"
		done
		rm -rf "$dir/root"
		mv "$tmp/root" "$dir/root"
		rm -rf "$tmp"
		# The binary itself points at forky's loader and libraries (an ELF
		# interpreter and DT_RPATH, which also covers its libraries' own
		# needs): a wrapper script would not survive a master-worker reload,
		# which re-executes the binary by its path.
		local root="$dir/root" libs
		libs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
		cp "$root/usr/sbin/haproxy" "$dir/haproxy.part"
		patchelf --force-rpath --set-rpath "$libs" \
			--set-interpreter "$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$dir/haproxy.part"
		"$dir/haproxy.part" -v >/dev/null || { log "HAProxy $v32 does not start"; return 1; }
		mv "$dir/haproxy.part" "$dir/haproxy"
		log "fetched HAProxy $v32 in $((SECONDS - start))s"
	fi
	echo "3.2 $dir/haproxy"
}

series=("$@")
((${#series[@]})) || series=(2.6 3.0 3.2)
for s in "${series[@]}"; do
	case "$s" in
	2.6) haproxy26 ;;
	3.0) haproxy30 ;;
	3.2) haproxy32 ;;
	*)
		log "unknown series $s (2.6, 3.0 or 3.2)"
		exit 2
		;;
	esac
done
