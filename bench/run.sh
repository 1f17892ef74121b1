#!/usr/bin/env bash
# Runs the benchmarks that exist so far and writes bench/results.md with
# the machine, date, commit and figures. Benchmarks, not tests: nothing here
# fails because the machine is slow.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/results.md
raw="$(mktemp)"
trap 'rm -f "$raw"' EXIT
echo "running Go benchmarks (pure functions, drainctl footprint) …" >&2
go test -run '^$' -bench . -benchmem -count 1 ./webhook/inject ./controller/source ./controller/plan | tee -a "$raw" >&2
go test -run '^$' -bench BenchmarkPollFootprint -benchtime 2x ./drainctl/ | tee -a "$raw" >&2
{
	echo "# Benchmark results"
	echo
	echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(go version | cut -d' ' -f3-4)"
	echo
	echo "| benchmark | what | time/op | bytes/op | allocs/op | other |"
	echo "|---|---|---|---|---|---|"
	awk '
	/^Benchmark/ {
		name=$1; sub(/-[0-9]+$/, "", name)
		what["BenchmarkInject"]="webhook mutation of an opted-in pod, 3 containers"
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
	echo "Goals (issue: benchmarks): drainctl under 8 MiB on disk and 10 MiB RSS. The admission, drain-propagation and scale benchmarks are not written yet."
} > "$out"
echo "wrote $out" >&2
cat "$out"
