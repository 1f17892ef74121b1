// Command stickydrain-chart is the chart's part of a release
// (tools/release/release.sh runs it):
//
//	stickydrain-chart publish --tag v1.2.3 --image stickydrain=REF --image drainctl=REF --repo REGISTRY/PATH [--out dist] [--plain-http]
//
// pins charts/stickydrain to the images (each REF registry/path/name:tag@sha256:…,
// as tools/images push prints them), checks it as helm lint --strict does,
// packages it into --out and pushes it to oci://REGISTRY/PATH/charts; it
// prints the pushed reference, registry/path/charts/stickydrain:1.2.3@sha256:….
//
//	stickydrain-chart verify --chart REF --image stickydrain=REF --image drainctl=REF [--plain-http]
//
// pulls the chart back and checks that it pins exactly those images.
// Registry credentials come from Helm's registry configuration, else
// Docker's (~/.docker/config.json, as docker login writes it).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	flag "github.com/spf13/pflag"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/registry"

	"github.com/stickydrain/stickydrain/tools/helm/chartrelease"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "stickydrain-chart:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("a command is needed: publish or verify (see --help of each)")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	imageFlags := fs.StringArray("image", nil, "`NAME=REF`: an image the chart runs (stickydrain, drainctl) and its reference by digest, registry/path/name:tag@sha256:…")
	plainHTTP := fs.Bool("plain-http", false, "the registry speaks plain HTTP (a rehearsal's registry on loopback)")
	var tag, dir, repo, out, ref *string
	switch args[0] {
	case "publish":
		tag = fs.String("tag", "", "the release's tag, `v1.2.3`: the chart's version 1.2.3, its appVersion v1.2.3")
		dir = fs.String("chart-dir", "charts/stickydrain", "the chart's `directory`")
		repo = fs.String("repo", "", "`registry/path` to push the chart under (to oci://registry/path/charts)")
		out = fs.String("out", "dist", "`directory` to write the packaged chart to")
	case "verify":
		ref = fs.String("chart", "", "the pushed chart, `registry/path/charts/stickydrain:1.2.3@sha256:…`")
	default:
		return fmt.Errorf("unknown command %q: want publish or verify", args[0])
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	images, err := parseImages(*imageFlags)
	if err != nil {
		return err
	}
	opts := []registry.ClientOption{registry.ClientOptWriter(stderr)}
	if *plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	rc, err := registry.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("registry client: %w", err)
	}
	if args[0] == "verify" {
		if *ref == "" {
			return errors.New("--chart is needed: the pushed chart, registry/path/charts/stickydrain:1.2.3@sha256:…")
		}
		ch, digest, err := chartrelease.Pull(rc, *ref)
		if err != nil {
			return err
		}
		if _, want, ok := strings.Cut(*ref, "@"); ok && want != digest {
			return fmt.Errorf("the chart at %s has digest %s", *ref, digest)
		}
		if err := chartrelease.Verify(ch, images); err != nil {
			return fmt.Errorf("oci://%s: %w", *ref, err)
		}
		fmt.Fprintf(stdout, "%s pins %s and %s\n", *ref, images["stickydrain"], images["drainctl"])
		return nil
	}
	version, appVersion, err := chartrelease.Versions(*tag)
	if err != nil {
		return fmt.Errorf("--tag: %w", err)
	}
	if *repo == "" {
		return errors.New("--repo is needed: the registry/path to push the chart under, e.g. ghcr.io/stickydrain")
	}
	ch, err := loader.Load(*dir)
	if err != nil {
		return fmt.Errorf("--chart-dir: %w", err)
	}
	if err := chartrelease.Pin(ch, version, appVersion, images); err != nil {
		return err
	}
	tgz, err := chartrelease.Package(ch, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "packaged %s\n", tgz)
	pushed, err := chartrelease.Push(rc, tgz, strings.TrimSuffix(*repo, "/")+"/charts")
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, pushed)
	return nil
}

func parseImages(flags []string) (map[string]chartrelease.Image, error) {
	images := map[string]chartrelease.Image{}
	for _, f := range flags {
		name, ref, ok := strings.Cut(f, "=")
		if _, known := chartrelease.ValuesKeys[name]; !ok || !known {
			return nil, fmt.Errorf("--image %q: want NAME=REF with NAME stickydrain or drainctl", f)
		}
		im, err := chartrelease.ParseImage(ref)
		if err != nil {
			return nil, fmt.Errorf("--image %s: %w", name, err)
		}
		images[name] = im
	}
	for name := range chartrelease.ValuesKeys {
		if _, ok := images[name]; !ok {
			return nil, fmt.Errorf("--image %s=REF is needed", name)
		}
	}
	return images, nil
}
