package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// ImageRepo and ImageTag name the images the tests build: the published
// repository, a tag no release uses.
const (
	ImageRepo = "ghcr.io/stickydrain"
	ImageTag  = "e2e"
)

// Image is one image built for the host's platform.
type Image struct {
	// Ref is ImageRepo/NAME:ImageTag.
	Ref string
	// Tarball is the file Import takes.
	Tarball string
}

// BuildImages builds the named images (tools/images: stickydrain, drainctl,
// sessionapp, pause, cert-manager) for this machine's platform into dir, as
// make images does. When $STICKYDRAIN_IMAGES names a directory holding them
// all (make test builds them there beside the other parts, from the same
// checkout), it returns those instead.
func BuildImages(ctx context.Context, dir string, logf func(string, ...any), names ...string) (map[string]Image, error) {
	if pre := os.Getenv("STICKYDRAIN_IMAGES"); pre != "" {
		imgs := images(pre, names)
		missing := false
		for _, i := range imgs {
			if _, err := os.Stat(i.Tarball); err != nil {
				missing = true
			}
		}
		if !missing {
			return imgs, nil
		}
		logf("$STICKYDRAIN_IMAGES (%s) lacks some of %s: building them", pre, strings.Join(names, ", "))
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("locating tools/images: no caller information")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	logf("building images %s with tools/images", strings.Join(names, ", "))
	cmd := exec.CommandContext(ctx, "go", "run", ".", "build", "--root", root, "--out", dir,
		"--repo", ImageRepo, "--version", ImageTag, "--platforms", "linux/"+runtime.GOARCH, "--images", strings.Join(names, ","))
	cmd.Dir = filepath.Join(root, "tools", "images")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building images: %w\n%s", err, out.String())
	}
	return images(dir, names), nil
}

func images(dir string, names []string) map[string]Image {
	imgs := map[string]Image{}
	for _, n := range names {
		imgs[n] = Image{
			Ref:     ImageRepo + "/" + n + ":" + ImageTag,
			Tarball: filepath.Join(dir, fmt.Sprintf("%s-linux-%s.tar", n, runtime.GOARCH)),
		}
	}
	return imgs
}
