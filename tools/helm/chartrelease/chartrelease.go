// Package chartrelease is the chart's part of a release, with Helm's SDK:
// pin charts/stickydrain to the release's images by digest, check it as
// `helm lint --strict` does, package it, push it to an OCI registry, and
// read a pushed chart back to check its pins. tools/release/release.sh runs
// it through cmd/stickydrain-chart, in the release workflow and in make
// release-rehearsal alike.
package chartrelease

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"
)

// ValuesKeys maps each image the chart runs (tools/images' names) to the
// values key that holds its repository, tag and digest.
var ValuesKeys = map[string]string{"stickydrain": "image", "drainctl": "drainctlImage"}

// Image is an image reference pushed by digest.
type Image struct {
	Repository, Tag, Digest string
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParseImage parses registry/path/name:tag@sha256:… (as tools/images push
// prints it); the tag may be left out.
func ParseImage(ref string) (Image, error) {
	repoTag, digest, ok := strings.Cut(ref, "@")
	if !ok || !digestRE.MatchString(digest) {
		return Image{}, fmt.Errorf("image %q: want registry/path/name:tag@sha256:<64 hex digits>", ref)
	}
	im := Image{Repository: repoTag, Digest: digest}
	if i := strings.LastIndex(repoTag, ":"); i > strings.LastIndex(repoTag, "/") {
		im.Repository, im.Tag = repoTag[:i], repoTag[i+1:]
	}
	if im.Repository == "" || !strings.Contains(im.Repository, "/") {
		return Image{}, fmt.Errorf("image %q: want registry/path/name:tag@sha256:<64 hex digits>", ref)
	}
	return im, nil
}

// String is the reference as ParseImage reads it.
func (im Image) String() string {
	s := im.Repository
	if im.Tag != "" {
		s += ":" + im.Tag
	}
	return s + "@" + im.Digest
}

// Versions derives the chart's version and appVersion from a release tag:
// v1.2.3 → 1.2.3 and v1.2.3.
func Versions(tag string) (version, appVersion string, err error) {
	v, ok := strings.CutPrefix(tag, "v")
	if !ok || !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		return "", "", fmt.Errorf("release tag %q: want v<major>.<minor>.<patch>[-<pre-release>], e.g. v1.2.0 or v1.2.0-rc.1", tag)
	}
	return v, tag, nil
}

// Pin sets the chart's version and appVersion, and points each image's
// values (ValuesKeys) at images[name]: in values.yaml itself, its comments
// kept, so that the packaged chart installs the release's images with no
// values given.
func Pin(ch *chart.Chart, version, appVersion string, images map[string]Image) error {
	if ch.Metadata == nil {
		return errors.New("the chart has no Chart.yaml")
	}
	for name := range ValuesKeys {
		if _, ok := images[name]; !ok {
			return fmt.Errorf("no %s image to pin the chart to", name)
		}
	}
	ch.Metadata.Version, ch.Metadata.AppVersion = version, appVersion
	var raw *common.File
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			raw = f
		}
	}
	if raw == nil {
		return fmt.Errorf("the chart has no %s", chartutil.ValuesfileName)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw.Data, &doc); err != nil {
		return fmt.Errorf("%s: %w", chartutil.ValuesfileName, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("%s: want a mapping", chartutil.ValuesfileName)
	}
	for name, key := range ValuesKeys {
		m := lookup(doc.Content[0], key)
		if m == nil || m.Kind != yaml.MappingNode {
			return fmt.Errorf("%s: no %s mapping to pin the %s image in", chartutil.ValuesfileName, key, name)
		}
		im := images[name]
		for field, value := range map[string]string{"repository": im.Repository, "tag": im.Tag, "digest": im.Digest} {
			v := lookup(m, field)
			if v == nil || v.Kind != yaml.ScalarNode {
				return fmt.Errorf("%s: no %s.%s to set", chartutil.ValuesfileName, key, field)
			}
			// Plain style, !!str: the encoder quotes what needs it ("").
			v.Value, v.Tag, v.Style = value, "!!str", 0
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return fmt.Errorf("%s: %w", chartutil.ValuesfileName, err)
	}
	raw.Data = b.Bytes()
	vals, err := common.ReadValues(raw.Data)
	if err != nil {
		return fmt.Errorf("%s as pinned: %w", chartutil.ValuesfileName, err)
	}
	ch.Values = vals.AsMap()
	return nil
}

// lookup returns the value node of key in the mapping m, or nil.
func lookup(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// Pins reads the images a chart's values point at, by ValuesKeys.
func Pins(ch *chart.Chart) (map[string]Image, error) {
	out := map[string]Image{}
	for name, key := range ValuesKeys {
		m, ok := ch.Values[key].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("the chart's values have no %s", key)
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		out[name] = Image{Repository: str("repository"), Tag: str("tag"), Digest: str("digest")}
	}
	return out, nil
}

// Package checks the chart as `helm lint --strict` does (warnings fail it)
// and writes it to dir as NAME-VERSION.tgz, whose path it returns.
func Package(ch *chart.Chart, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp("", "stickydrain-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	tgz, err := chartutil.Save(ch, tmp)
	if err != nil {
		return "", fmt.Errorf("packaging the chart: %w", err)
	}
	lint := action.NewLint()
	lint.Strict = true
	if res := lint.Run([]string{tgz}, nil); len(res.Errors) > 0 {
		var msgs []string
		for _, m := range res.Messages {
			msgs = append(msgs, m.Error())
		}
		return "", fmt.Errorf("helm lint --strict: %w\n%s", errors.Join(res.Errors...), strings.Join(msgs, "\n"))
	}
	out := filepath.Join(dir, filepath.Base(tgz))
	if err := os.Rename(tgz, out); err != nil {
		data, rerr := os.ReadFile(tgz)
		if rerr != nil {
			return "", rerr
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			return "", err
		}
	}
	return out, nil
}

// Push pushes the packaged chart tgz to oci://repo/NAME:VERSION (repo is
// registry/path, no scheme) and returns registry/path/NAME:VERSION@sha256:….
func Push(rc *registry.Client, tgz, repo string) (string, error) {
	data, err := os.ReadFile(tgz)
	if err != nil {
		return "", err
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("%s: %w", tgz, err)
	}
	ref := strings.TrimPrefix(repo, "oci://") + "/" + ch.Metadata.Name + ":" + ch.Metadata.Version
	res, err := rc.Push(data, ref)
	if err != nil {
		return "", fmt.Errorf("pushing the chart to oci://%s: %w", ref, err)
	}
	return ref + "@" + res.Manifest.Digest, nil
}

// Pull reads back the chart at registry/path/NAME:VERSION (or @sha256:…)
// and returns it with its manifest's digest.
func Pull(rc *registry.Client, ref string) (*chart.Chart, string, error) {
	res, err := rc.Pull(strings.TrimPrefix(ref, "oci://"))
	if err != nil {
		return nil, "", fmt.Errorf("pulling the chart oci://%s: %w", ref, err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	if err != nil {
		return nil, "", fmt.Errorf("the chart at oci://%s: %w", ref, err)
	}
	return ch, res.Manifest.Digest, nil
}

// Verify checks that ch pins exactly the images want (ValuesKeys'
// names), repository, tag and digest.
func Verify(ch *chart.Chart, want map[string]Image) error {
	got, err := Pins(ch)
	if err != nil {
		return err
	}
	var errs []error
	for name := range ValuesKeys {
		if got[name] != want[name] {
			errs = append(errs, fmt.Errorf("the chart's %s image is %s, want %s", name, got[name], want[name]))
		}
	}
	return errors.Join(errs...)
}
