package chartrelease

import (
	"context"
	"io"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"

	testregistry "github.com/stickydrain/stickydrain/test/registry"
)

func chartDir(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "charts", "stickydrain")
}

func digest(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

var release = map[string]Image{
	"stickydrain": {Repository: "registry.example.com/team/stickydrain", Tag: "v1.2.3", Digest: digest('a')},
	"drainctl":    {Repository: "registry.example.com/team/drainctl", Tag: "v1.2.3", Digest: digest('b')},
}

func TestPinWritesTheDigestsIntoValuesYAMLAndKeepsItsComments(t *testing.T) {
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	before := ""
	for _, f := range ch.Raw {
		if f.Name == chartutil.ValuesfileName {
			before = string(f.Data)
		}
	}
	if err := Pin(ch, "1.2.3", "v1.2.3", release); err != nil {
		t.Fatal(err)
	}
	tgz, err := Package(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(tgz) != "stickydrain-1.2.3.tgz" {
		t.Errorf("packaged as %s, want stickydrain-1.2.3.tgz", filepath.Base(tgz))
	}
	// What a user installs: the archive, read back.
	got, err := loader.Load(tgz)
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata.Version != "1.2.3" || got.Metadata.AppVersion != "v1.2.3" {
		t.Errorf("version %s, appVersion %s; want 1.2.3, v1.2.3", got.Metadata.Version, got.Metadata.AppVersion)
	}
	if err := Verify(got, release); err != nil {
		t.Error(err)
	}
	var after string
	for _, f := range got.Raw {
		if f.Name == chartutil.ValuesfileName {
			after = string(f.Data)
		}
	}
	// Every comment line of values.yaml is still there (they document the
	// values for whoever reads the packaged chart).
	for _, line := range strings.Split(before, "\n") {
		if c := strings.TrimSpace(line); strings.HasPrefix(c, "#") && !strings.Contains(after, c) {
			t.Errorf("the pinned values.yaml lost the comment %q", c)
		}
	}
	if !strings.Contains(after, "digest: sha256:"+strings.Repeat("a", 64)) {
		t.Errorf("the pinned values.yaml does not pin stickydrain by digest:\n%s", after)
	}
	// Everything else is as it was.
	orig, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range orig.Values {
		if _, pinned := map[string]bool{"image": true, "drainctlImage": true}[k]; pinned {
			continue
		}
		if !reflect.DeepEqual(v, got.Values[k]) {
			t.Errorf("values %s changed: %v, was %v", k, got.Values[k], v)
		}
	}
}

func TestVerifyNamesTheImageAChartDoesNotPin(t *testing.T) {
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := Pin(ch, "1.2.3", "v1.2.3", release); err != nil {
		t.Fatal(err)
	}
	other := map[string]Image{"stickydrain": release["stickydrain"], "drainctl": release["drainctl"]}
	d := other["drainctl"]
	d.Digest = digest('c')
	other["drainctl"] = d
	err = Verify(ch, other)
	if err == nil || !strings.Contains(err.Error(), "drainctl") || strings.Contains(err.Error(), "stickydrain image") {
		t.Errorf("Verify with another drainctl digest: %v; want an error naming drainctl alone", err)
	}
}

func TestBadInputIsNamed(t *testing.T) {
	for _, ref := range []string{
		"registry.example.com/team/stickydrain:v1",         // no digest
		"registry.example.com/team/stickydrain@sha256:abc", // short digest
		"stickydrain@" + digest('a'),                       // no registry
		"registry.example.com/team/stickydrain@md5:" + "a", // not sha256
	} {
		if _, err := ParseImage(ref); err == nil || !strings.Contains(err.Error(), "sha256:<64 hex digits>") {
			t.Errorf("ParseImage(%q): %v; want the accepted form named", ref, err)
		}
	}
	if im, err := ParseImage("127.0.0.1:5000/stickydrain/drainctl:v1@" + digest('d')); err != nil || im.Repository != "127.0.0.1:5000/stickydrain/drainctl" || im.Tag != "v1" {
		t.Errorf("a registry with a port: %+v, %v", im, err)
	}
	if im, err := ParseImage("127.0.0.1:5000/stickydrain/drainctl@" + digest('d')); err != nil || im.Tag != "" {
		t.Errorf("a reference without a tag: %+v, %v", im, err)
	}
	for _, tag := range []string{"1.2.3", "v1.2", "v1.2.3+build", "release-1"} {
		if _, _, err := Versions(tag); err == nil || !strings.Contains(err.Error(), "v<major>.<minor>.<patch>") {
			t.Errorf("Versions(%q): %v; want the accepted form named", tag, err)
		}
	}
	if v, app, err := Versions("v1.2.0-rc.1"); err != nil || v != "1.2.0-rc.1" || app != "v1.2.0-rc.1" {
		t.Errorf("Versions(v1.2.0-rc.1) = %s, %s, %v", v, app, err)
	}
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := Pin(ch, "1.2.3", "v1.2.3", map[string]Image{"stickydrain": release["stickydrain"]}); err == nil || !strings.Contains(err.Error(), "drainctl") {
		t.Errorf("Pin without drainctl: %v; want it named", err)
	}
}

// The chart pushed to a real OCI registry (the Distribution registry) and
// read back as a user's helm pull would: its digest the one Push printed,
// its pins the release's.
func TestAPushedChartComesBackPinned(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Distribution registry (-short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := testregistry.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	rc, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := Pin(ch, "1.2.3", "v1.2.3", release); err != nil {
		t.Fatal(err)
	}
	tgz, err := Package(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Push(rc, tgz, reg.Host+"/team/charts")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ref, reg.Host+"/team/charts/stickydrain:1.2.3@sha256:") {
		t.Fatalf("pushed as %s", ref)
	}
	got, d, err := Pull(rc, reg.Host+"/team/charts/stickydrain:1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(ref, "@"+d) {
		t.Errorf("pulled digest %s, pushed %s", d, ref)
	}
	if err := Verify(got, release); err != nil {
		t.Error(err)
	}
}
