package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/webhook/inject"
)

// The images hold what the install runs: each container of the manifests
// that names the stickydrain or the drainctl image runs a binary the image
// holds, and the drainctl image holds drainctl where the injected init
// container runs it.
// (This replaces the Dockerfile, which no machine here could build.)
func TestTheImagesHoldWhatTheManifestsRun(t *testing.T) {
	paths := map[string]map[string]bool{}
	for _, img := range Images() {
		paths[img.Name] = map[string]bool{}
		for _, b := range img.Binaries {
			paths[img.Name][b.Path] = true
		}
	}
	for _, f := range []string{"webhook/deployment.yaml", "controller/deployment.yaml", "samples/haproxy/deployment.yaml"} {
		raw, err := os.ReadFile(filepath.Join("../../manifests", f))
		if err != nil {
			t.Fatal(err)
		}
		type container struct {
			Name    string   `json:"name"`
			Image   string   `json:"image"`
			Command []string `json:"command"`
		}
		var d struct {
			Spec struct {
				Template struct {
					Spec struct {
						InitContainers []container `json:"initContainers"`
						Containers     []container `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		seen := false
		for _, c := range append(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers...) {
			repo, _, _ := strings.Cut(c.Image, ":")
			name, ours := strings.CutPrefix(repo, DefaultRepo+"/")
			if !ours || paths[name] == nil {
				continue
			}
			seen = seen || name == "stickydrain"
			if len(c.Command) == 0 || !paths[name][c.Command[0]] {
				t.Errorf("%s: container %s runs %v, which the %s image does not hold", f, c.Name, c.Command, name)
			}
		}
		if !seen {
			t.Errorf("%s runs no stickydrain image", f)
		}
	}
	if !paths["drainctl"][inject.InstallerPath] {
		t.Errorf("the drainctl image does not hold %s, which the webhook's init container runs", inject.InstallerPath)
	}
}
