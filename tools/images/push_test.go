package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// `make push` against a registry: go-containerregistry's own registry
// implementation (the distribution API, in memory) on loopback. Every
// platform's image lands under the tag the build gave it, with the digest
// the build printed, and pulling it back gives the same index.
func TestPushToARegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles binaries for two platforms")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	out := t.TempDir()
	built, err := Build(context.Background(), testOptions(t, out, "drainctl", "pause"))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	repo := host + "/mirror/stickydrain"
	if err := Run(context.Background(), []string{"push", "--out", out, "--repo", repo, "--images", "drainctl,pause"}, &stdout, &stderr); err != nil {
		t.Fatalf("push: %v\n%s", err, stderr.String())
	}
	for _, b := range built {
		want := repo + "/" + b.Name + ":v9.9.9@" + b.Digest.String()
		if !strings.Contains(stdout.String(), want+"\n") {
			t.Errorf("push printed %q, want a line %q", stdout.String(), want)
		}
		ref, err := name.NewTag(repo + "/" + b.Name + ":v9.9.9")
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref)
		if err != nil {
			t.Fatalf("pulling %s back: %v", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if d != b.Digest {
			t.Errorf("%s: the registry holds %s, the build made %s", ref, d, b.Digest)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var plats []string
		for _, m := range im.Manifests {
			if _, err := idx.Image(m.Digest); err != nil {
				t.Errorf("%s: image %s for %v not in the registry: %v", ref, m.Digest, m.Platform, err)
			}
			plats = append(plats, m.Platform.String())
		}
		if got := strings.Join(plats, ","); got != "linux/amd64,linux/arm64" {
			t.Errorf("%s: platforms %s, want linux/amd64,linux/arm64", ref, got)
		}
	}

	// What a user gets wrong is named.
	err = Run(context.Background(), []string{"push", "--out", out}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--repo is needed") {
		t.Errorf("push without --repo: %v, want the flag named", err)
	}
	err = Run(context.Background(), []string{"push", "--out", out, "--repo", repo, "--images", "stickydrain"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "image stickydrain") || !strings.Contains(err.Error(), "make images") {
		t.Errorf("push of an image not built: %v, want it named and make images suggested", err)
	}
}
