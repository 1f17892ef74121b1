package main

// Binary is one Go command an image holds.
type Binary struct {
	// Package is the main package, relative to the module it is built in.
	Package string
	// Path is where the image holds it, e.g. "/webhook".
	Path string
	// Tags are build tags.
	Tags []string
	// VersionVar, when set, is the variable -X sets to the version.
	VersionVar string
	// Module is the directory of the Go module to build in, relative to the
	// checkout; empty means the main module.
	Module string
}

// Image is what one image holds and how it starts. Every image also holds
// the base layer: /etc/passwd and /etc/group with the non-root user 65532
// (nonroot) and the CA certificates.
type Image struct {
	// Name is the last element of the image's repository, e.g. "drainctl".
	Name        string
	Description string
	Binaries    []Binary
	// Entrypoint is the image's command; pods usually name their own.
	Entrypoint []string
	// Test marks an image only the tests run (the session app, the pause
	// process): built by the tests, not published.
	Test bool
}

// versionVar is what the webhook's and the controller's build_info says.
const versionVar = "github.com/stickydrain/stickydrain/internal/version.Version"

// NonRoot is the user and group every image runs as.
const NonRoot = 65532

// Images are the images make images builds: the two the install runs, and
// the ones the real-node tests add (the sample session app, the sandbox
// process). The Dockerfile they replace built the first two on a base image
// this machine cannot pull; here every file has a stated source.
func Images() []Image {
	return []Image{
		{
			Name:        "stickydrain",
			Description: "stickydrain's webhook, controller, HAProxy reload helper and certificate command",
			Binaries: []Binary{
				{Package: "./webhook", Path: "/webhook", VersionVar: versionVar},
				{Package: "./controller", Path: "/controller", VersionVar: versionVar},
				{Package: "./controller/cmd/stickydrain-haproxy", Path: "/stickydrain-haproxy"},
				{Package: "./certs/cmd/stickydrain-certs", Path: "/stickydrain-certs"},
			},
			Entrypoint: []string{"/controller"},
		},
		{
			Name:        "drainctl",
			Description: "drainctl, the preStop helper stickydrain's webhook copies into opted-in pods",
			Binaries: []Binary{{
				Package: "./drainctl", Path: "/drainctl",
				// drainctl only talks HTTP/1.1 to its own pod: leaving out
				// net/http's HTTP/2 keeps the copy in every pod small.
				Tags:       []string{"nethttpomithttp2"},
				VersionVar: "github.com/stickydrain/stickydrain/drainctl/cli.Version",
			}},
			Entrypoint: []string{"/drainctl"},
		},
		{
			Name:        "sessionapp",
			Description: "the sample session-bound application of stickydrain's tests (no shell in the image)",
			Binaries:    []Binary{{Package: "./test/sessionapp/cmd/sessionapp", Path: "/sessionapp"}},
			Entrypoint:  []string{"/sessionapp"},
			Test:        true,
		},
		{
			Name:        "cert-manager",
			Description: "cert-manager's certificate controllers and CA injector (a thin main over cert-manager's packages) for stickydrain's real-node tests",
			Binaries:    []Binary{{Module: "test/tools/certmanager", Package: "./cmd/cert-manager", Path: "/cert-manager"}},
			Entrypoint:  []string{"/cert-manager"},
			Test:        true,
		},
		{
			Name:        "pause",
			Description: "the sandbox process of stickydrain's real-node tests",
			Binaries:    []Binary{{Package: "./test/pause", Path: "/pause"}},
			Entrypoint:  []string{"/pause"},
			Test:        true,
		},
	}
}
