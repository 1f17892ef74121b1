package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// BuildOptions say what to build and where.
type BuildOptions struct {
	// Root is the checkout the binaries are built from.
	Root string
	// Out receives one OCI image layout per image (Out/NAME), one image
	// tarball per image and platform for `ctr images import`
	// (Out/NAME-OS-ARCH.tar) and the list of references and digests
	// (Out/images.txt).
	Out string
	// Repo prefixes each image's name in its reference: REPO/NAME:VERSION.
	Repo string
	// Version is the images' tag and drainctl's --version.
	Version string
	// Revision is the source revision the labels name.
	Revision string
	// Epoch is every file's and the images' creation time: the same sources
	// at the same epoch give the same digests.
	Epoch time.Time
	// Platforms to build, e.g. linux/amd64.
	Platforms []v1.Platform
	// Names of the images to build; empty means all but the test images.
	Names []string
	// CACerts is the CA certificate bundle the images carry.
	CACerts string
	// Log receives progress lines.
	Log func(format string, args ...any)
}

// Built is one image written.
type Built struct {
	Name string
	// Ref is REPO/NAME:VERSION.
	Ref string
	// Digest is the image index's: the multi-platform image.
	Digest v1.Hash
	// Platforms maps "os/arch" to that platform's image manifest digest.
	Platforms map[string]v1.Hash
}

// Build compiles the images' binaries for every platform and writes the
// images.
func Build(ctx context.Context, o BuildOptions) ([]Built, error) {
	imgs, err := selectImages(o.Names)
	if err != nil {
		return nil, err
	}
	if len(o.Platforms) == 0 {
		return nil, errors.New("no platform to build for")
	}
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificates the images carry: %w (install Debian's ca-certificates, or pass --ca-certs)", err)
	}
	base, err := baseLayer(o.Epoch, ca)
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "stickydrain-images-")
	if err != nil {
		return nil, fmt.Errorf("creating a build directory: %w", err)
	}
	defer os.RemoveAll(work)

	// binaries[platform][path in image] = file on disk
	binaries := map[string]map[string]string{}
	for _, p := range o.Platforms {
		dir := filepath.Join(work, p.OS+"_"+p.Architecture)
		got, err := compile(ctx, o, imgs, p, dir)
		if err != nil {
			return nil, err
		}
		binaries[p.String()] = got
	}

	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.Out, err)
	}
	var out []Built
	for _, spec := range imgs {
		b, err := writeImage(o, spec, base, binaries)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", spec.Name, err)
		}
		out = append(out, b)
		o.Log("%s %s@%s", b.Name, b.Ref, b.Digest)
	}
	if err := writeList(filepath.Join(o.Out, "images.txt"), out); err != nil {
		return nil, err
	}
	return out, nil
}

func selectImages(names []string) ([]Image, error) {
	all := Images()
	if len(names) == 0 {
		var out []Image
		for _, i := range all {
			if !i.Test {
				out = append(out, i)
			}
		}
		return out, nil
	}
	var out []Image
	for _, n := range names {
		found := false
		for _, i := range all {
			if i.Name == n {
				out = append(out, i)
				found = true
			}
		}
		if !found {
			var known []string
			for _, i := range all {
				known = append(known, i.Name)
			}
			return nil, fmt.Errorf("--images: no image %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// compile builds every binary of imgs for platform p into dir, one go build
// per module and flag set, and returns path in image → file.
func compile(ctx context.Context, o BuildOptions, imgs []Image, p v1.Platform, dir string) (map[string]string, error) {
	type group struct {
		module, tags, ldflags string
		bins                  []Binary
	}
	groups := map[string]*group{}
	var keys []string
	for _, img := range imgs {
		for _, b := range img.Binaries {
			if path.Base(b.Package) != path.Base(b.Path) {
				return nil, fmt.Errorf("binary %s: go build names it %s, not %s", b.Package, path.Base(b.Package), path.Base(b.Path))
			}
			ld := "-s -w"
			if b.VersionVar != "" {
				ld += " -X " + b.VersionVar + "=" + o.Version
			}
			tags := strings.Join(b.Tags, ",")
			k := b.Module + "\x00" + tags + "\x00" + ld
			g, ok := groups[k]
			if !ok {
				g = &group{module: b.Module, tags: tags, ldflags: ld}
				groups[k] = g
				keys = append(keys, k)
			}
			g.bins = append(g.bins, b)
		}
	}
	sort.Strings(keys)
	out := map[string]string{}
	for i, k := range keys {
		g := groups[k]
		gdir := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(gdir, 0o755); err != nil {
			return nil, err
		}
		args := []string{"build", "-trimpath", "-ldflags", g.ldflags, "-o", gdir + "/"}
		if g.tags != "" {
			args = append(args, "-tags", g.tags)
		}
		var names []string
		for _, b := range g.bins {
			args = append(args, b.Package)
			names = append(names, path.Base(b.Path))
		}
		o.Log("building %s for %s", strings.Join(names, ", "), p)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(o.Root, g.module)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go %s for %s: %w\n%s", strings.Join(args, " "), p, err, stderr.String())
		}
		for _, b := range g.bins {
			out[b.Path] = filepath.Join(gdir, path.Base(b.Path))
		}
	}
	return out, nil
}

// entry is one file or directory of a layer.
type entry struct {
	path string
	mode int64
	uid  int
	dir  bool
	data []byte
}

// layer makes a gzip-compressed OCI layer of entries, every time stamp at
// epoch and entries in the order given, so that the same entries give the
// same digest.
func layer(epoch time.Time, entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    strings.TrimPrefix(e.path, "/"),
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.uid,
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing layer entry %s: %w", e.path, err)
		}
		if !e.dir {
			if _, err := tw.Write(e.data); err != nil {
				return nil, fmt.Errorf("writing layer entry %s: %w", e.path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("closing layer: %w", err)
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression),
		// Compressed once: the digest, the layout and every tarball read it.
		tarball.WithCompressedCaching)
}

// baseLayer holds what a static binary needs of an operating system: the
// non-root user's passwd and group entries (written here), the CA
// certificates (the build machine's bundle, Debian's ca-certificates), and a
// writable /tmp.
func baseLayer(epoch time.Time, caCerts []byte) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	return layer(epoch, []entry{
		{path: "/etc", mode: 0o755, dir: true},
		{path: "/etc/group", mode: 0o644, data: []byte(group)},
		{path: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "/etc/ssl", mode: 0o755, dir: true},
		{path: "/etc/ssl/certs", mode: 0o755, dir: true},
		{path: "/etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: caCerts},
		{path: "/home", mode: 0o755, dir: true},
		{path: "/home/nonroot", mode: 0o700, uid: NonRoot, dir: true},
		{path: "/tmp", mode: 0o1777, dir: true},
	})
}

// Labels are the image's org.opencontainers.image.* labels.
func Labels(o BuildOptions, spec Image) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       spec.Name,
		"org.opencontainers.image.description": spec.Description,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.created":     o.Epoch.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":      "https://github.com/stickydrain/stickydrain",
		"org.opencontainers.image.url":         "https://github.com/stickydrain/stickydrain",
	}
}

// platformImage assembles spec's image for one platform from its binaries.
func platformImage(o BuildOptions, spec Image, base v1.Layer, p v1.Platform, bins map[string]string) (v1.Image, error) {
	var entries []entry
	for _, b := range spec.Binaries {
		file, ok := bins[b.Path]
		if !ok {
			return nil, fmt.Errorf("no %s built for %s", b.Path, p)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", file, err)
		}
		entries = append(entries, entry{path: b.Path, mode: 0o755, data: data})
	}
	app, err := layer(o.Epoch, entries)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: o.Epoch}
	adds := []mutate.Addendum{
		{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "stickydrain-images: passwd, group, CA certificates, /tmp"}},
		{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "stickydrain-images: " + spec.Name + " binaries"}},
	}
	if spec.Host != nil {
		host, err := hostLayer(o, spec, p)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: host, MediaType: types.OCILayer,
			History: v1.History{Created: created, CreatedBy: "stickydrain-images: " + spec.Name + ": the build machine's files"}})
	}
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return nil, fmt.Errorf("adding layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = created
	cf.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.Env = append([]string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}, spec.Env...)
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = Labels(o, spec)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("writing config: %w", err)
	}
	return img, nil
}

func writeImage(o BuildOptions, spec Image, base v1.Layer, binaries map[string]map[string]string) (Built, error) {
	ref := o.Repo + "/" + spec.Name + ":" + o.Version
	tag, err := name.NewTag(ref)
	if err != nil {
		return Built{}, fmt.Errorf("--repo/--version: %q is not an image reference: %w", ref, err)
	}
	b := Built{Name: spec.Name, Ref: ref, Platforms: map[string]v1.Hash{}}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.Platforms {
		img, err := platformImage(o, spec, base, p, binaries[p.String()])
		if err != nil {
			return b, err
		}
		d, err := img.Digest()
		if err != nil {
			return b, err
		}
		b.Platforms[p.String()] = d
		pl := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
		tarPath := filepath.Join(o.Out, fmt.Sprintf("%s-%s-%s.tar", spec.Name, p.OS, p.Architecture))
		if err := writeTarball(tarPath, tag, img); err != nil {
			return b, err
		}
	}
	idx = mutate.Annotations(idx, Labels(o, spec)).(v1.ImageIndex)
	if b.Digest, err = idx.Digest(); err != nil {
		return b, err
	}
	dir := filepath.Join(o.Out, spec.Name)
	if err := os.RemoveAll(dir); err != nil {
		return b, fmt.Errorf("removing the previous layout: %w", err)
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return b, fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return b, fmt.Errorf("writing OCI layout %s: %w", dir, err)
	}
	return b, nil
}

// writeTarball writes img as an image tarball that `ctr images import` and
// `docker load` take, through a temporary file so that an interrupted build
// never leaves a truncated one.
func writeTarball(path string, tag name.Tag, img v1.Image) error {
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// writeList writes one "NAME REF DIGEST" line per image (the index: the
// multi-platform image), then one "NAME REF DIGEST PLATFORM" line per
// platform's image.
func writeList(path string, built []Built) error {
	var buf bytes.Buffer
	for _, b := range built {
		fmt.Fprintf(&buf, "%s %s %s\n", b.Name, b.Ref, b.Digest)
		var ps []string
		for p := range b.Platforms {
			ps = append(ps, p)
		}
		sort.Strings(ps)
		for _, p := range ps {
			fmt.Fprintf(&buf, "%s %s %s %s\n", b.Name, b.Ref, b.Platforms[p], p)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
