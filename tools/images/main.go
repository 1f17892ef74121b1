// Command stickydrain-images builds stickydrain's container images without a
// container engine, and pushes them.
//
//	stickydrain-images build [--out bin/images] [--platforms linux/amd64,linux/arm64] [--images NAME,…]
//	stickydrain-images push --repo REGISTRY/PATH [--out bin/images] [--images NAME,…]
//
// build compiles the static binaries (CGO_ENABLED=0, -trimpath) for each
// platform and writes, per image, an OCI image layout (multi-platform), an
// image tarball per platform for `ctr images import`, and images.txt with
// every reference and digest. The same sources, version and epoch give the
// same digests (SOURCE_DATE_EPOCH, else the commit's time). push copies the
// built layouts to a registry with the credentials of ~/.docker/config.json.
// It is a module of its own so that go-containerregistry stays out of the
// main module.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "stickydrain-images:", err)
		os.Exit(1)
	}
}
