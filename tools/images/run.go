package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	flag "github.com/spf13/pflag"
)

// DefaultRepo is where a release publishes the images.
const DefaultRepo = "ghcr.io/stickydrain"

// Run runs the command line args.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("a command is needed: build, push or sbom (see --help of each)")
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	switch args[0] {
	case "build":
		o, err := parseBuild(args[1:], stderr)
		if err != nil {
			return err
		}
		o.Log = logf
		built, err := Build(ctx, o)
		if err != nil {
			return err
		}
		for _, b := range built {
			fmt.Fprintf(stdout, "%s %s %s\n", b.Name, b.Ref, b.Digest)
		}
		return nil
	case "push":
		return push(ctx, args[1:], stdout, stderr)
	case "sbom":
		return sbom(ctx, args[1:], stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q: want build, push or sbom", args[0])
	}
}

func parseBuild(args []string, stderr io.Writer) (BuildOptions, error) {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", ".", "the checkout to build from")
	out := fs.String("out", "bin/images", "`directory` to write the images to")
	repo := fs.String("repo", DefaultRepo, "`registry/path` the references name")
	version := fs.String("version", "dev", "the images' tag and drainctl's version")
	platforms := fs.StringSlice("platforms", []string{"linux/amd64", "linux/arm64"}, "`os/arch` list to build for")
	names := fs.StringSlice("images", nil, "images to build (default: every published one: stickydrain, drainctl); the tests add sessionapp and pause")
	ca := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA certificate `bundle` the images carry")
	if err := fs.Parse(args); err != nil {
		return BuildOptions{}, err
	}
	o := BuildOptions{Out: *out, Repo: *repo, Version: *version, Names: *names, CACerts: *ca}
	var err error
	if o.Root, err = filepath.Abs(*root); err != nil {
		return o, err
	}
	for _, p := range *platforms {
		pl, err := v1.ParsePlatform(p)
		if err != nil || pl.OS == "" || pl.Architecture == "" {
			return o, fmt.Errorf("--platforms: %q is not os/arch, e.g. linux/arm64", p)
		}
		o.Platforms = append(o.Platforms, *pl)
	}
	o.Revision = gitOutput(o.Root, "rev-parse", "HEAD")
	if o.Epoch, err = epoch(o.Root); err != nil {
		return o, err
	}
	return o, nil
}

// epoch is SOURCE_DATE_EPOCH when set, else the time of the commit checked
// out, else the Unix epoch: never the clock, so that a rebuild matches.
func epoch(root string) (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970: %w", s, err)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	if s := gitOutput(root, "log", "-1", "--format=%ct"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return time.Unix(n, 0).UTC(), nil
		}
	}
	return time.Unix(0, 0).UTC(), nil
}

func gitOutput(dir string, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func push(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "bin/images", "`directory` make images wrote the images to")
	repo := fs.String("repo", "", "`registry/path` to push to, e.g. registry.example.com/stickydrain")
	names := fs.StringSlice("images", []string{"stickydrain", "drainctl"}, "images to push")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *repo == "" {
		return errors.New("--repo is needed: the registry/path to push to, e.g. registry.example.com/stickydrain")
	}
	for _, n := range *names {
		idx, ref, err := layoutIndex(filepath.Join(*out, n))
		if err != nil {
			return fmt.Errorf("image %s: %w (run make images first)", n, err)
		}
		tag := "latest"
		if t, ok := ref.(name.Tag); ok {
			tag = t.TagStr()
		}
		dst, err := name.NewTag(*repo + "/" + n + ":" + tag)
		if err != nil {
			return fmt.Errorf("--repo: %w", err)
		}
		digest, err := idx.Digest()
		if err != nil {
			return fmt.Errorf("image %s: %w", n, err)
		}
		if err := remote.WriteIndex(dst, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", dst, err)
		}
		fmt.Fprintf(stdout, "%s@%s\n", dst, digest)
	}
	return nil
}
