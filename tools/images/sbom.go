package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx/v2/common"
	spdx "github.com/spdx/tools-golang/spdx/v2/v2_3"
	flag "github.com/spf13/pflag"
)

// SBOM is the SPDX 2.3 document of one image (its index, every
// platform): the image; each Go binary in it, per platform, with its
// SHA-256, the Go toolchain and the module it was built from; every module
// linked into a binary (name, version, package URL); and every other file
// of the image (the CA certificates, passwd and group) with its SHA-256.
// Built from what the image holds (the binaries' embedded build
// information), not from go.mod: a module in go.mod that no binary links
// is not in it.
func SBOM(idx v1.ImageIndex, ref name.Reference, created time.Time) (*spdx.Document, error) {
	digest, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	repo := ref.Context().Name()
	imageName := repo[strings.LastIndex(repo, "/")+1:]
	tag := ""
	if t, ok := ref.(name.Tag); ok {
		tag = t.TagStr()
	}
	doc := &spdx.Document{
		SPDXVersion:       spdx.Version,
		DataLicense:       spdx.DataLicense,
		SPDXIdentifier:    "DOCUMENT",
		DocumentName:      repo + "@" + digest.String(),
		DocumentNamespace: "https://github.com/stickydrain/stickydrain/spdx/" + imageName + "/" + digest.Hex,
		CreationInfo: &spdx.CreationInfo{
			Creators: []common.Creator{{CreatorType: "Tool", Creator: "stickydrain tools/images"}},
			Created:  created.UTC().Format(time.RFC3339),
		},
	}
	const imageID = "Image"
	doc.Packages = append(doc.Packages, &spdx.Package{
		PackageName:             repo,
		PackageSPDXIdentifier:   imageID,
		PackageVersion:          tag,
		PackageDownloadLocation: "NOASSERTION",
		PackageChecksums:        []common.Checksum{{Algorithm: common.SHA256, Value: digest.Hex}},
		PackageLicenseConcluded: "NOASSERTION",
		PackageLicenseDeclared:  "NOASSERTION",
		PackageCopyrightText:    "NOASSERTION",
		PrimaryPackagePurpose:   "CONTAINER",
		PackageExternalReferences: []*spdx.PackageExternalReference{{
			Category: common.CategoryPackageManager, RefType: common.TypePackageManagerPURL,
			Locator: "pkg:oci/" + imageName + "@" + strings.Replace(digest.String(), ":", "%3A", 1) + "?repository_url=" + repo,
		}},
	})
	doc.Relationships = append(doc.Relationships, &spdx.Relationship{
		RefA: common.MakeDocElementID("", "DOCUMENT"), RefB: common.MakeDocElementID("", imageID), Relationship: common.TypeRelationshipDescribe,
	})
	modules := map[string]*spdx.Package{}
	// Identifiers are numbered, so that no two elements share one
	// whatever their names hold.
	files, mods := 0, 0
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			return nil, fmt.Errorf("the index's manifest %s names no platform", desc.Digest)
		}
		plat := desc.Platform.OS + "/" + desc.Platform.Architecture
		if desc.Platform.Variant != "" {
			plat += "/" + desc.Platform.Variant
		}
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", plat, err)
		}
		imgFiles, err := imageFiles(img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", plat, err)
		}
		for _, f := range imgFiles {
			files++
			id := fmt.Sprintf("File-%d-%s", files, spdxID(path.Base(f.path)))
			sum := sha256.Sum256(f.data)
			pkg := &spdx.Package{
				PackageName:             f.path + " (" + plat + ")",
				PackageSPDXIdentifier:   common.ElementID(id),
				PackageFileName:         f.path,
				PackageDownloadLocation: "NOASSERTION",
				PackageChecksums:        []common.Checksum{{Algorithm: common.SHA256, Value: hex.EncodeToString(sum[:])}},
				PackageLicenseConcluded: "NOASSERTION",
				PackageLicenseDeclared:  "NOASSERTION",
				PackageCopyrightText:    "NOASSERTION",
				PrimaryPackagePurpose:   "FILE",
			}
			doc.Packages = append(doc.Packages, pkg)
			doc.Relationships = append(doc.Relationships, &spdx.Relationship{
				RefA: common.MakeDocElementID("", imageID), RefB: common.MakeDocElementID("", id), Relationship: common.TypeRelationshipContains,
			})
			bi, err := buildinfo.Read(bytes.NewReader(f.data))
			if err != nil {
				continue // not a Go binary
			}
			pkg.PrimaryPackagePurpose = "APPLICATION"
			pkg.PackageVersion = bi.Main.Version
			pkg.PackageComment = "built by " + bi.GoVersion + " from " + bi.Path + settingsNote(bi.Settings)
			if bi.Main.Path == "github.com/stickydrain/stickydrain" {
				pkg.PackageLicenseDeclared = "Apache-2.0"
				pkg.PackageDownloadLocation = "git+https://github.com/stickydrain/stickydrain"
			}
			deps := append([]*debug.Module{{Path: "stdlib", Version: bi.GoVersion}}, bi.Deps...)
			for _, m := range deps {
				if m.Replace != nil {
					m = m.Replace
				}
				key := m.Path + "@" + m.Version
				mp, ok := modules[key]
				if !ok {
					mods++
					mp = &spdx.Package{
						PackageName:             m.Path,
						PackageSPDXIdentifier:   common.ElementID(fmt.Sprintf("GoModule-%d", mods)),
						PackageVersion:          m.Version,
						PackageDownloadLocation: "NOASSERTION",
						PackageLicenseConcluded: "NOASSERTION",
						PackageLicenseDeclared:  "NOASSERTION",
						PackageCopyrightText:    "NOASSERTION",
						PrimaryPackagePurpose:   "LIBRARY",
						PackageExternalReferences: []*spdx.PackageExternalReference{{
							Category: common.CategoryPackageManager, RefType: common.TypePackageManagerPURL,
							Locator: goPURL(m.Path, m.Version),
						}},
					}
					if m.Sum != "" {
						mp.PackageComment = "go.sum " + m.Sum
					}
					modules[key] = mp
				}
				doc.Relationships = append(doc.Relationships, &spdx.Relationship{
					RefA: common.MakeDocElementID("", id), RefB: common.MakeDocElementID("", string(mp.PackageSPDXIdentifier)), Relationship: common.TypeRelationshipContains,
				})
			}
		}
	}
	keys := make([]string, 0, len(modules))
	for k := range modules {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		doc.Packages = append(doc.Packages, modules[k])
	}
	return doc, nil
}

// goPURL is the package URL of a Go module (purl's golang type): the
// version percent-encoded (+incompatible), the standard library's
// without its "go" (pkg:golang/stdlib@1.26.8), as vulnerability databases
// name it.
func goPURL(path, version string) string {
	if path == "stdlib" {
		version = strings.TrimPrefix(version, "go")
	}
	return "pkg:golang/" + path + "@" + strings.ReplaceAll(url.PathEscape(version), "+", "%2B")
}

// settingsNote names the build settings a reader of an SBOM asks about.
func settingsNote(settings []debug.BuildSetting) string {
	var parts []string
	for _, s := range settings {
		switch s.Key {
		case "CGO_ENABLED", "GOOS", "GOARCH", "-trimpath", "-tags", "vcs.revision":
			parts = append(parts, s.Key+"="+s.Value)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, " ") + ")"
}

var notIDChars = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// spdxID makes an SPDX identifier (letters, digits, '.', '-') of s.
func spdxID(s string) string {
	return strings.Trim(notIDChars.ReplaceAllString(s, "-"), "-")
}

type imageFile struct {
	path string
	data []byte
}

// imageFiles returns the regular files of img's flattened filesystem, in
// path order.
func imageFiles(img v1.Image) ([]imageFile, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var files []imageFile
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files = append(files, imageFile{path: "/" + strings.TrimPrefix(h.Name, "/"), data: data})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, nil
}

// sbom writes NAME.spdx.json into --dest for each image of --images, from
// the layouts make images wrote.
func sbom(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sbom", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "bin/images", "`directory` make images wrote the images to")
	dest := fs.String("dest", "dist", "`directory` to write NAME.spdx.json to")
	names := fs.StringSlice("images", []string{"stickydrain", "drainctl"}, "images to describe")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := os.MkdirAll(*dest, 0o755); err != nil {
		return err
	}
	for _, n := range *names {
		idx, ref, err := layoutIndex(filepath.Join(*out, n))
		if err != nil {
			return fmt.Errorf("image %s: %w (run make images first)", n, err)
		}
		created := time.Unix(0, 0)
		if cf, err := firstConfig(idx); err == nil {
			created = cf.Created.Time
		}
		doc, err := SBOM(idx, ref, created)
		if err != nil {
			return fmt.Errorf("image %s: %w", n, err)
		}
		var b bytes.Buffer
		if err := spdxjson.Write(doc, &b, spdxjson.Indent("  ")); err != nil {
			return fmt.Errorf("image %s: %w", n, err)
		}
		path := filepath.Join(*dest, n+".spdx.json")
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stdout, path)
	}
	return nil
}

// layoutIndex opens the one image index an OCI layout of make images holds,
// and the reference it is annotated with.
func layoutIndex(dir string) (v1.ImageIndex, name.Reference, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, nil, err
	}
	ii, err := lp.ImageIndex()
	if err != nil {
		return nil, nil, err
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	if len(im.Manifests) != 1 {
		return nil, nil, fmt.Errorf("the layout holds %d images, want the one image index make images writes", len(im.Manifests))
	}
	ref, err := name.ParseReference(im.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	if err != nil {
		return nil, nil, fmt.Errorf("the layout's reference: %w", err)
	}
	idx, err := ii.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		return nil, nil, err
	}
	return idx, ref, nil
}

// firstConfig is the config file of the index's first image.
func firstConfig(idx v1.ImageIndex) (*v1.ConfigFile, error) {
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) == 0 {
		return nil, fmt.Errorf("no image: %v", err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return nil, err
	}
	return img.ConfigFile()
}
