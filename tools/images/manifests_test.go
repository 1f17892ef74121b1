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
// that names the stickydrain image runs a binary the image holds, and the
// drainctl image holds drainctl where the webhook's init container runs it.
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
		var d struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name    string   `json:"name"`
							Image   string   `json:"image"`
							Command []string `json:"command"`
							Args    []string `json:"args"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		seen := false
		for _, c := range d.Spec.Template.Spec.Containers {
			repo, _, _ := strings.Cut(c.Image, ":")
			if repo != DefaultRepo+"/stickydrain" {
				continue
			}
			seen = true
			if len(c.Command) == 0 || !paths["stickydrain"][c.Command[0]] {
				t.Errorf("%s: container %s runs %v, which the stickydrain image does not hold", f, c.Name, c.Command)
			}
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--drainctl-image="); ok {
					if r, _, _ := strings.Cut(v, ":"); r != DefaultRepo+"/drainctl" {
						t.Errorf("%s: --drainctl-image=%s is not the drainctl image", f, v)
					}
				}
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
