#!/usr/bin/env bash
# Runs every benchmark and writes bench/results.md with the machine, date,
# commit and figures: the Go benchmarks of the pure functions, drainctl's
# footprint, then the system benchmarks on the real local control plane
# (bench/cmd/stickydrain-bench: admission, propagation, scale; about 15
# minutes, as root, with STICKYDRAIN_K8S_BINS set by make bench).
# Benchmarks, not tests: nothing here fails because the machine is slow.
# BENCH_ONLY=go skips the system benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/results.md
# The hypervisor's steal over the whole run, for the header: on a shared
# virtual machine the tails of the latency figures move with it.
steal() { awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t; exit }' /proc/stat; }
read -r steal0 total0 < <(steal)
raw="$(mktemp)"
sys="$(mktemp -d)"
trap 'rm -rf "$raw" "$sys"' EXIT
if [ "${BENCH_ONLY:-}" != go ]; then
	go build -o "$sys/stickydrain-bench" ./bench/cmd/stickydrain-bench
	for b in admission propagation scale; do
		echo "running stickydrain-bench $b …" >&2
		"$sys/stickydrain-bench" --out "$sys/$b.md" "$b"
	done
fi
echo "running Go benchmarks (pure functions, drainctl footprint) …" >&2
go test -run '^$' -bench . -benchmem -count 1 ./webhook/inject ./webhook/admit ./controller/endpoints ./controller/plan | tee -a "$raw" >&2
go test -run '^$' -bench BenchmarkPollFootprint -benchtime 2x ./drainctl/ | tee -a "$raw" >&2
# Whether the tree differs from the commit (this file aside, which is being written).
dirty=""
git diff --quiet HEAD -- . ':!bench/results.md' 2>/dev/null || dirty=" (with uncommitted changes)"
{
	echo "# Benchmark results"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$dirty"
	read -r steal1 total1 < <(steal)
	echo "- CPU time stolen by the hypervisor during the run: $(awk -v s=$((steal1 - steal0)) -v t=$((total1 - total0)) 'BEGIN { printf "%.1f %%", t ? 100 * s / t : 0 }')"
	echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(go version | cut -d' ' -f3-4)"
	# The ratio tables of the system sections, first: each figure against
	# its floor or its peer, measured in the same run.
	ratios="$(for b in admission propagation scale; do
		[ -f "$sys/$b.md" ] || continue
		awk -v bench="$b" '
		/^\| .* \| ratio \| goal \|$/ { n = split($0, h, " \\| "); against = h[3]; inside = 1; next }
		inside && /^\|---/ { next }
		inside && /^\| / {
			sub(/^\| /, ""); sub(/ \|$/, ""); split($0, c, " \\| ")
			r = c[4]; g = c[5]; sub(/×$/, "", r); sub(/^≤ /, "", g); sub(/×$/, "", g)
			met = "—"
			if (r ~ /^[0-9.]+$/ && g ~ /^[0-9.]+$/) met = (r + 0 <= g + 0) ? "yes" : "**no**"
			printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", bench, c[1], c[2], against, c[3], c[4], c[5], met
			next
		}
		{ inside = 0 }' "$sys/$b.md"
	done)"
	if [ -n "$ratios" ]; then
		echo
		echo "## Ratios: each figure against its floor or its peer, in the same run"
		echo
		echo "The absolute tables follow in each section, with the CPU the host stole during each run."
		echo
		echo "| benchmark | figure | stickydrain | against | its figure | ratio | goal | met |"
		echo "|---|---|---|---|---|---|---|---|"
		echo "$ratios"
	fi
	echo
	echo "| benchmark | what | time/op | bytes/op | allocs/op | other |"
	echo "|---|---|---|---|---|---|"
	awk '
	/^Benchmark/ {
		name=$1; sub(/-[0-9]+$/, "", name)
		what["BenchmarkInject"]="webhook mutation of an opted-in pod, 3 containers"
		what["BenchmarkAdmitPod"]="one pod admission (decode, Namespace read, mutation, typed JSON patch), no TLS/HTTP"
		what["BenchmarkDesired"]="desired servers from 100 slices × 100 endpoints"
		what["BenchmarkCalculate"]="plan over 10,000 servers, 100 changed"
		what["BenchmarkPollFootprint"]="drainctl binary polling every 20 ms for 3 s"
		t=""; b=""; a=""; other=""
		for (i=3; i<NF; i+=2) {
			if ($(i+1)=="ns/op") t=$i " ns"
			else if ($(i+1)=="B/op") b=$i
			else if ($(i+1)=="allocs/op") a=$i
			else other=other $i " " $(i+1) "; "
		}
		if (name=="BenchmarkPollFootprint") t=""
		printf "| %s | %s | %s | %s | %s | %s |\n", name, what[name], t, b, a, other
	}' "$raw"
	echo
	echo "Goals: drainctl under 8 MiB on disk and 10 MiB RSS."
	for b in admission propagation scale; do
		if [ -f "$sys/$b.md" ]; then
			echo
			cat "$sys/$b.md"
		fi
	done
	if [ -f bench/notes.md ]; then
		echo
		cat bench/notes.md
	fi
} > "$out"
echo "wrote $out" >&2
cat "$out"
