package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	spdxjson "github.com/spdx/tools-golang/json"
)

// The SBOM of a built image, read back with the SPDX library as a scanner
// reads it: the image by its digest; drainctl's binary for each platform
// with the SHA-256 of the file in the image; the modules drainctl links,
// with the Go standard library, each with a package URL; the CA bundle;
// and nothing the binary does not link (the Kubernetes client).
func TestTheSBOMListsWhatTheImageHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles binaries for two platforms")
	}
	out := t.TempDir()
	built, err := Build(context.Background(), testOptions(t, out, "drainctl"))
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"sbom", "--out", out, "--dest", dest, "--images", "drainctl"}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	f, err := os.Open(filepath.Join(dest, "drainctl.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := spdxjson.Read(f)
	if err != nil {
		t.Fatalf("the SBOM is not SPDX JSON: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || !strings.Contains(doc.DocumentName, built[0].Digest.String()) {
		t.Errorf("document %s %q, want SPDX-2.3 naming %s", doc.SPDXVersion, doc.DocumentName, built[0].Digest)
	}
	byName := map[string]string{} // package name → version
	purls := map[string]bool{}
	sums := map[string]string{}
	for _, p := range doc.Packages {
		byName[p.PackageName] = p.PackageVersion
		for _, r := range p.PackageExternalReferences {
			if r.RefType == "purl" {
				purls[r.Locator] = true
			}
		}
		for _, c := range p.PackageChecksums {
			sums[p.PackageName] = c.Value
		}
	}
	if sums["registry.test/stickydrain/drainctl"] != built[0].Digest.Hex {
		t.Errorf("the image's package has checksum %s, want its digest %s", sums["registry.test/stickydrain/drainctl"], built[0].Digest.Hex)
	}
	// The binary in the image, per platform, with its own SHA-256.
	for _, plat := range []string{"linux/amd64", "linux/arm64"} {
		name := "/drainctl (" + plat + ")"
		if _, ok := byName[name]; !ok {
			t.Errorf("no package %q in %v", name, keys(byName))
			continue
		}
		files, err := platformFiles(out, plat)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(files["/drainctl"])
		if sums[name] != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: checksum %s, want the file's %x", name, sums[name], sum)
		}
	}
	// The modules drainctl links (its go.mod's, as this test binary was
	// built from the same main module), the standard library, and none
	// drainctl does not link.
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information")
	}
	want := []string{"pkg:golang/stdlib@" + strings.TrimPrefix(bi.GoVersion, "go"), "pkg:golang/github.com/spf13/pflag@"}
	for _, w := range want {
		found := false
		for p := range purls {
			found = found || strings.HasPrefix(p, w)
		}
		if !found {
			t.Errorf("no package URL %s… among %v", w, keys(purls))
		}
	}
	for p := range purls {
		if strings.Contains(p, "k8s.io/client-go") {
			t.Errorf("the SBOM lists %s, which drainctl does not link", p)
		}
	}
	ids := map[string]bool{}
	for _, p := range doc.Packages {
		if ids[string(p.PackageSPDXIdentifier)] {
			t.Errorf("two packages share the SPDX identifier %s", p.PackageSPDXIdentifier)
		}
		ids[string(p.PackageSPDXIdentifier)] = true
	}
	if got := goPURL("github.com/x/y", "v2.0.0+incompatible"); got != "pkg:golang/github.com/x/y@v2.0.0%2Bincompatible" {
		t.Errorf("goPURL: %s", got)
	}
	if _, ok := byName["/etc/ssl/certs/ca-certificates.crt (linux/amd64)"]; !ok {
		t.Errorf("the CA bundle is not listed: %v", keys(byName))
	}
}

// platformFiles reads the files of the drainctl image for plat from the
// layout under out.
func platformFiles(out, plat string) (map[string][]byte, error) {
	idx, _, err := layoutIndex(filepath.Join(out, "drainctl"))
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, d := range im.Manifests {
		if d.Platform.OS+"/"+d.Platform.Architecture != plat {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		fs, err := imageFiles(img)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			files[f.path] = f.data
		}
	}
	return files, nil
}
