#!/usr/bin/env bash
# Builds the ingress controllers the ingress end-to-end tests run against,
# from their Go modules, into a versioned cache directory outside the
# checkout, and prints one line per peer:
#
#   <peer> <version> <executable> [<resources directory>]
#
# Skips a peer whose executable is already there. Usage: build.sh [PEER...]
# (default: haproxy-ingress traefik).
#
#   haproxy-ingress  v0.16.1 (test/peers/haproxy-ingress/go.mod); cold ~2 min.
#                    Its resources directory holds the module's rootfs/
#                    (templates, Lua), which it reads at run time.
#   traefik          v3.7.13 (test/peers/traefik/go.mod); cold ~6 min, ~3 GB.
#                    Built from a copy of its tools module in the cache with
#                    go-acme/lego/v5 replaced by a copy that leaves out the
#                    DNS providers whose SDKs the module proxy refuses.
#
#   STICKYDRAIN_CACHE   cache root (default: $XDG_CACHE_HOME or $HOME/.cache, /stickydrain)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${STICKYDRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stickydrain}"

log() { echo "test/peers/build.sh: $*" >&2; }

# version MODDIR MODULE: the version go.mod requires.
version() { awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$1/go.mod"; }

# moddir MODULE@VERSION: where the module cache holds it (downloaded if not).
moddir() { (cd "$here/haproxy-ingress" && go mod download -json "$1" | awk -F'"' '$2 == "Dir" {print $4}'); }

haproxy_ingress() {
	local v dir
	v="$(version "$here/haproxy-ingress" github.com/jcmoraisjr/haproxy-ingress)"
	dir="$cache_root/haproxy-ingress-$v"
	if [[ ! -x "$dir/haproxy-ingress" ]]; then
		mkdir -p "$dir"
		local tmp start=$SECONDS src
		tmp="$(mktemp -d "$dir/.build.XXXXXX")"
		log "building haproxy-ingress $v into $dir (about 2 minutes cold)"
		(cd "$here/haproxy-ingress" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/haproxy-ingress" github.com/jcmoraisjr/haproxy-ingress/pkg)
		src="$(cd "$here/haproxy-ingress" && go list -m -f '{{.Dir}}' github.com/jcmoraisjr/haproxy-ingress)"
		rm -rf "$dir/rootfs"
		cp -r "$src/rootfs" "$dir/rootfs"
		chmod -R u+w "$dir/rootfs"
		mv "$tmp/haproxy-ingress" "$dir/haproxy-ingress"
		rm -rf "$tmp"
		log "built haproxy-ingress $v in $((SECONDS - start))s"
	fi
	echo "haproxy-ingress $v $dir/haproxy-ingress $dir/rootfs"
}

# The DNS providers of lego whose SDKs the module proxy answers 403 for.
refused_dns=(alidns aliesa azion dnsimple edgedns edgeone huaweicloud oraclecloud regfish
	sakuracloud tencentcloud ucloud yandexcloud)

traefik() {
	local v dir
	v="$(version "$here/traefik" github.com/traefik/traefik/v3)"
	dir="$cache_root/traefik-$v"
	if [[ ! -x "$dir/traefik" ]]; then
		mkdir -p "$dir"
		local tmp start=$SECONDS lego_v lego
		tmp="$(mktemp -d "$dir/.build.XXXXXX")"
		log "building Traefik $v into $dir (about 6 minutes and 3 GB cold)"
		lego_v="$(version "$here/traefik" github.com/go-acme/lego/v5)"
		[[ -n "$lego_v" ]] || lego_v=v5.4.1
		lego="$tmp/lego"
		cp -r "$(moddir "github.com/go-acme/lego/v5@$lego_v")" "$lego"
		chmod -R u+w "$lego"
		local p
		for p in "${refused_dns[@]}"; do
			rm -rf "$lego/providers/dns/$p"
			# Its import, and its case of the provider switch.
			perl -0pi -e "s{\\n\\t\"github.com/go-acme/lego/v5/providers/dns/$p\"}{}g; s{\\n\\tcase [^\\n]*:\\n\\t\\treturn $p\\.[^\\n]*}{}g" \
				"$lego/providers/dns/zz_gen_dns_providers.go"
		done
		cp -r "$here/traefik/." "$tmp/mod"
		chmod -R u+w "$tmp/mod"
		echo "replace github.com/go-acme/lego/v5 => $lego" >>"$tmp/mod/go.mod"
		(cd "$tmp/mod" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/traefik" github.com/traefik/traefik/v3/cmd/traefik)
		mv "$tmp/traefik" "$dir/traefik"
		rm -rf "$tmp"
		log "built Traefik $v in $((SECONDS - start))s"
	fi
	echo "traefik $v $dir/traefik"
}

peers=("$@")
((${#peers[@]})) || peers=(haproxy-ingress traefik)
for p in "${peers[@]}"; do
	case "$p" in
	haproxy-ingress) haproxy_ingress ;;
	traefik) traefik ;;
	*)
		log "unknown peer $p (haproxy-ingress or traefik)"
		exit 2
		;;
	esac
done
