package podinfo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	// As the kubelet writes it: sorted keys, values quoted with %q.
	in := "kubectl.kubernetes.io/default-container=\"app\"\nstickydrain.io/max-wait=\"30m\"\nnote=\"line\\nbreak \\\"quoted\\\"\"\n"
	got, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"kubectl.kubernetes.io/default-container": "app",
		"stickydrain.io/max-wait":                 "30m",
		"note":                                    "line\nbreak \"quoted\"",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if _, err := Parse([]byte("novalue\n")); err == nil {
		t.Error("Parse accepted a line without =")
	}
	if _, err := Parse([]byte("k=unquoted\n")); err == nil {
		t.Error("Parse accepted an unquoted value")
	}
}
