package version

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestBuildInfoSaysWhichBuildRuns(t *testing.T) {
	old := Version
	Version = "v9.8.7"
	defer func() { Version = old }()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(BuildInfo("controller")); err != nil {
		t.Fatal(err)
	}
	want := `# HELP stickydrain_build_info Which build of a stickydrain component runs: 1, labelled with the component, version, revision and Go version.
# TYPE stickydrain_build_info gauge
`
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("%v, %v; want one series", mfs, err)
	}
	var labels []string
	for _, l := range mfs[0].GetMetric()[0].GetLabel() {
		labels = append(labels, l.GetName()+"="+l.GetValue())
	}
	got := strings.Join(labels, ",")
	if !strings.Contains(got, "component=controller") || !strings.Contains(got, "version=v9.8.7") || !strings.Contains(got, "goversion=go") || !strings.Contains(got, "revision=") {
		t.Errorf("labels %s", got)
	}
	if mfs[0].GetMetric()[0].GetGauge().GetValue() != 1 || !strings.HasPrefix(want, "# HELP "+mfs[0].GetName()+" "+mfs[0].GetHelp()) {
		t.Errorf("build_info is %v, help %q", mfs[0].GetMetric()[0].GetGauge().GetValue(), mfs[0].GetHelp())
	}
}
