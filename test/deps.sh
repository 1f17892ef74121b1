#!/usr/bin/env bash
# Installs what the tests need and a fresh Debian machine may lack. Idempotent
# and quiet when everything is there already.
set -euo pipefail

need=()
command -v ip >/dev/null || need+=(iproute2)
# test/podhost: nsenter, unshare and mount run each container in its namespaces.
# controller tests: the real HAProxy from Debian (2.6), never started as a service.
command -v haproxy >/dev/null || need+=(haproxy)
# test/tools/haproxy.sh: HAProxy 3.0 is built from source, 3.2 fetched from
# Debian forky and patched to use forky's libraries.
declare -A pkg=([curl]=curl [xz]=xz-utils [make]=make [gcc]=gcc [patchelf]=patchelf)
for c in "${!pkg[@]}"; do
	command -v "$c" >/dev/null || need+=("${pkg[$c]}")
done
# Lua: the sample configuration's gate (docs/haproxy.md) is a Lua action.
declare -A hdr=([openssl/ssl.h]=libssl-dev [pcre2.h]=libpcre2-dev [zlib.h]=zlib1g-dev [lua5.4/lua.h]=liblua5.4-dev)
for h in "${!hdr[@]}"; do
	[[ -e /usr/include/$h ]] || need+=("${hdr[$h]}")
done
# test/e2e's haproxy-ingress runs Debian's HAProxy with Lua scripts that
# need lua-json.
[[ -e /usr/share/lua/5.3/json.lua || -e /usr/share/lua/5.3/json/init.lua ]] || need+=(lua-json)
# The real-node tests: containerd (built from its module) runs containers with
# Debian's runc and gives pods addresses with Debian's CNI plugins.
command -v runc >/dev/null || need+=(runc)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] || need+=(containernetworking-plugins)
# test/apps: the application servers teams run, as Debian ships them —
# Tomcat 10.1 and its manager, PHP's CLI server, Node.js and npm (which
# installs express-session for the Node app).
[[ -x /usr/share/tomcat10/bin/catalina.sh ]] || need+=(tomcat10)
[[ -d /usr/share/tomcat10-admin/manager ]] || need+=(tomcat10-admin)
command -v php >/dev/null || need+=(php-cli)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
# test/registry: the CNCF Distribution registry, which the chart and the
# images are pushed to and the real node pulls from.
[[ -x /usr/bin/docker-registry ]] || need+=(docker-registry)
for c in nsenter unshare mount; do
	command -v "$c" >/dev/null || { need+=(util-linux mount); break; }
done

if ((${#need[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "test/deps.sh: missing ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "test/deps.sh: installing ${need[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
