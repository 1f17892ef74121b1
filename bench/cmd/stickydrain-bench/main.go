// Command stickydrain-bench runs stickydrain's system benchmarks on the
// real local control plane (test/cluster) and writes each result as a
// markdown section (bench/run.sh assembles bench/results.md):
//
//	stickydrain-bench admission    # the webhook over TLS at fixed rates and at saturation; pod create latency
//	stickydrain-bench propagation  # deletion → drain on every instance, 1,000 Services × 10 endpoints
//	stickydrain-bench scale        # controller RSS and CPU at 10k and 100k endpoints
//
// Benchmarks, not tests: they report what they measure and fail only when
// something does not work (a refused admission, a drain never applied).
// They need root (as the tests do) and the control-plane binaries
// (test/tools/build.sh).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	flag "github.com/spf13/pflag" // GNU-style flags, as every stickydrain binary
)

func main() {
	out := flag.String("out", "", "`file` to write the markdown section to (default stdout)")
	pprofAddr := flag.String("pprof", "", "`address` for the measured binary's pprof endpoint: admission, the webhook's (the 1000/s run's CPU profile goes to bench/webhook-cpu-1000.prof, its heap after it to bench/webhook-heap-1000.prof); propagation, the controller's (its CPU profile over its burst and trickle goes to bench/controller-cpu-propagation.prof)")
	controllerBin := flag.String("controller", "", "controller `binary` to measure (default: built from this tree), e.g. an older build for a before/after figure")
	controllerArgs := flag.StringArray("controller-arg", nil, "a `flag` given to the controller (repeat for more), e.g. --controller-arg=--concurrent-reconciles=32 for a figure with other settings")
	dur := flag.Duration("duration", 0, "how long each fixed-rate admission run lasts (default 10s; 200ms with --smoke)")
	smoke := flag.Bool("smoke", false, "a run in seconds that only shows each mode works (tiny sizes; figures meaningless)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: stickydrain-bench [-out FILE] admission|propagation|scale")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctl := controllerRun{Bin: *controllerBin, Args: *controllerArgs}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := log.New(os.Stderr, "bench: ", log.Ltime).Printf
	sz := fullSize
	if *smoke {
		sz = smokeSize
	}
	if *dur > 0 {
		sz.AdmissionRun = *dur
	}
	var run func(dir string) (string, error)
	switch flag.Arg(0) {
	case "admission":
		run = func(dir string) (string, error) { return admission(ctx, dir, logf, sz, *pprofAddr) }
	case "propagation":
		run = func(dir string) (string, error) { return propagation(ctx, dir, logf, ctl, sz, *pprofAddr) }
	case "scale":
		run = func(dir string) (string, error) { return scale(ctx, dir, logf, ctl, sz) }
	default:
		flag.Usage()
		os.Exit(2)
	}
	// The processes' logs and configurations go to dir, kept when a run
	// fails so the error's log paths can be read.
	dir, err := os.MkdirTemp("", "stickydrain-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "stickydrain-bench:", err)
		os.Exit(1)
	}
	section, err := run(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "stickydrain-bench: %v\n(logs kept in %s)\n", err, dir)
		os.Exit(1)
	}
	_ = os.RemoveAll(dir)
	if *out == "" {
		fmt.Print(section)
		return
	}
	if err := os.WriteFile(*out, []byte(section), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "stickydrain-bench:", err)
		os.Exit(1)
	}
}
