package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func testOptions(t *testing.T, out string, names ...string) BuildOptions {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return BuildOptions{
		Root: root, Out: out, Repo: "registry.test/stickydrain", Version: "v9.9.9", Revision: "abc",
		Epoch:     time.Unix(1_700_000_000, 0).UTC(),
		Platforms: []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}},
		Names:     names, CACerts: ca, Log: t.Logf,
	}
}

// The same sources, version and epoch give the same digests: a rebuild (a
// release re-run, a user checking a published image) matches byte for byte.
func TestBuildIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles binaries for two platforms")
	}
	a, err := Build(context.Background(), testOptions(t, t.TempDir(), "pause", "drainctl"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(context.Background(), testOptions(t, t.TempDir(), "pause", "drainctl"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("two builds of the same sources differ (-first +second):\n%s", diff)
	}
	// And the digest does depend on what goes in.
	o := testOptions(t, t.TempDir(), "pause")
	o.Epoch = o.Epoch.Add(time.Second)
	c, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if c[0].Digest == a[0].Digest {
		t.Errorf("another epoch gave the same digest %s", c[0].Digest)
	}
}

// What a pod runs: each platform's image is that platform's, runs as the
// non-root user, holds the binaries executable and the passwd entry and CA
// certificates a static binary needs; the layout names the reference, and
// the tarball for ctr import is the same image.
func TestBuiltImage(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles binaries for two platforms")
	}
	out := t.TempDir()
	o := testOptions(t, out, "drainctl")
	built, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := layout.FromPath(filepath.Join(out, "drainctl"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].Digest != built[0].Digest {
		t.Fatalf("layout index holds %+v, want the one image index %s", rm.Manifests, built[0].Digest)
	}
	if got := rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != "registry.test/stickydrain/drainctl:v9.9.9" {
		t.Errorf("layout names %q", got)
	}
	idx, err := root.ImageIndex(built[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index holds %d images, want one per platform", len(im.Manifests))
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("%s: config says %s/%s", d.Platform, cf.OS, cf.Architecture)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532", d.Platform, cf.Config.User)
		}
		if diff := cmp.Diff([]string{"/drainctl"}, cf.Config.Entrypoint); diff != "" {
			t.Errorf("%s: entrypoint (-want +got):\n%s", d.Platform, diff)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.version":  "v9.9.9",
			"org.opencontainers.image.revision": "abc",
			"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
			"org.opencontainers.image.source":   "https://github.com/stickydrain/stickydrain",
		} {
			if cf.Config.Labels[k] != want {
				t.Errorf("%s: label %s=%q, want %q", d.Platform, k, cf.Config.Labels[k], want)
			}
		}
		files, data := contents(t, img)
		if f := files["drainctl"]; f == nil || f.Mode&0o111 == 0 || f.Uid != 0 {
			t.Errorf("%s: /drainctl missing, not executable or not root-owned: %+v", d.Platform, f)
		} else if arch := elfMachine(t, data["drainctl"], "drainctl"); arch != d.Platform.Architecture {
			t.Errorf("%s: /drainctl is built for %s", d.Platform, arch)
		}
		for _, p := range []string{"etc/passwd", "etc/group", "etc/ssl/certs/ca-certificates.crt", "tmp/"} {
			if files[p] == nil && files[strings.TrimSuffix(p, "/")] == nil {
				t.Errorf("%s: no /%s", d.Platform, p)
			}
		}
		if !strings.Contains(string(data["etc/passwd"]), "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd has no entry for 65532", d.Platform)
		}
		for _, h := range files {
			if !h.ModTime.Equal(o.Epoch) {
				t.Errorf("%s: /%s is dated %s, want the epoch %s", d.Platform, h.Name, h.ModTime, o.Epoch)
			}
		}
		// The tarball ctr imports is this very image.
		tb, err := tarball.ImageFromPath(filepath.Join(out, "drainctl-linux-"+d.Platform.Architecture+".tar"), nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := img.ConfigName()
		got, err := tb.ConfigName()
		if err != nil || got != want {
			t.Errorf("%s: the tarball's config is %s (%v), want %s", d.Platform, got, err, want)
		}
	}
	list, err := os.ReadFile(filepath.Join(out, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(list), "drainctl registry.test/stickydrain/drainctl:v9.9.9 "+built[0].Digest.String()+"\n") {
		t.Errorf("images.txt does not list the index digest:\n%s", list)
	}
}

func TestBuildRefusesUnknownImagesAndPlatforms(t *testing.T) {
	_, err := Build(context.Background(), testOptions(t, t.TempDir(), "nginx"))
	if err == nil || !strings.Contains(err.Error(), `no image "nginx"`) || !strings.Contains(err.Error(), "stickydrain, drainctl") {
		t.Errorf("an unknown image gave %v, want an error naming it and the known ones", err)
	}
	_, err = parseBuild([]string{"--platforms", "amd64"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--platforms") {
		t.Errorf("a platform without its OS gave %v, want an error naming --platforms", err)
	}
}

// contents reads img's flattened file system once: each entry's header,
// and the bytes of the regular files.
func contents(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			data[h.Name] = b
		}
	}
}

// elfMachine reads the ELF header's machine field of an executable.
func elfMachine(t *testing.T, b []byte, name string) string {
	t.Helper()
	if len(b) < 20 || string(b[1:4]) != "ELF" {
		t.Fatalf("%s is not an ELF file", name)
	}
	switch uint16(b[18]) | uint16(b[19])<<8 {
	case 62:
		return "amd64"
	case 183:
		return "arm64"
	}
	return "unknown"
}

// An image of the build machine's files: its trees with links followed and
// skips left out, the libraries its ELF files load and their loader, its
// writable directories the non-root user's; and only for this platform.
func TestHostFilesLayer(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"a/keep.txt": "kept", "a/skip.txt": "skipped", "b/target.txt": "by its link"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../b/target.txt", filepath.Join(dir, "a", "link.txt")); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, t.TempDir())
	spec := Image{Name: "host", Host: &HostFiles{
		Trees:        []HostTree{{From: filepath.Join(dir, "a"), To: "/app", Skip: []string{"skip.txt"}}, {From: "/usr/bin/true"}},
		LibrariesOf:  []string{"/usr/bin/true"},
		WritableDirs: []string{"/app/work"},
	}}
	l, err := hostLayer(o, spec, v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	hdrs, data := contents(t, img)
	if string(data["app/keep.txt"]) != "kept" || string(data["app/link.txt"]) != "by its link" || hdrs["app/link.txt"].Typeflag != tar.TypeReg {
		t.Errorf("the tree: keep %q, link %q (want the linked file's bytes)", data["app/keep.txt"], data["app/link.txt"])
	}
	if _, ok := hdrs["app/skip.txt"]; ok {
		t.Error("a skipped file is in the image")
	}
	h := hdrs["app/work/"]
	if h == nil {
		h = hdrs["app/work"]
	}
	if h == nil || h.Uid != NonRoot {
		t.Errorf("writable directory: %+v, want owned by %d", h, NonRoot)
	}
	libc := false
	for name := range hdrs {
		libc = libc || strings.HasSuffix(name, "/libc.so.6")
	}
	if !libc || hdrs["usr/bin/true"] == nil {
		t.Errorf("/usr/bin/true without its libc: %v", keys(hdrs))
	}
	if _, err := hostLayer(o, spec, v1.Platform{OS: "linux", Architecture: "s390x"}); err == nil || !strings.Contains(err.Error(), "build machine's files") {
		t.Errorf("another platform: %v, want refused", err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
