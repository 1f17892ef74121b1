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
	// Host, when set, adds files of the build machine (Debian's packages,
	// the checkout's): such an image is built for the build machine's own
	// platform only.
	Host *HostFiles
	// Env is the image's environment beside PATH and SSL_CERT_FILE.
	Env []string
}

// HostFiles are what an image takes from the build machine, in one layer.
type HostFiles struct {
	// Trees are files and directories, symbolic links followed.
	Trees []HostTree
	// LibrariesOf are ELF files of the image (globs, at their path in the
	// image, which is their path on the build machine) whose shared
	// libraries and dynamic loader the image gets too, where ldd finds
	// them on the build machine.
	LibrariesOf []string
	// WritableDirs are directories created for the non-root user.
	WritableDirs []string
}

// HostTree is one file or directory of the build machine an image holds.
type HostTree struct {
	// From is its path: absolute, or relative to the checkout.
	From string
	// To is its path in the image; empty: From (which is then absolute).
	To string
	// Skip are paths under From (slash-separated, relative) left out.
	Skip []string
}

// jdk is Debian's OpenJDK 17 (openjdk-17-jre-headless).
const jdk = "/usr/lib/jvm/java-17-openjdk-amd64"

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
			Name: "tomcat",
			Description: "Debian's Tomcat 10.1 and its manager on Debian's OpenJDK 17 (the build machine's files: tomcat10, tomcat10-admin), " +
				"running the session app of stickydrain's tests as JSP (test/e2e/testdata/tomcat), for the real-node tests",
			Host: &HostFiles{
				Trees: []HostTree{
					{From: jdk, Skip: []string{"jmods", "man", "docs", "include", "legal", "lib/src.zip", "lib/ct.sym",
						// The desktop's libraries: a server needs none of them.
						"lib/libawt_xawt.so", "lib/libsplashscreen.so", "lib/libjawt.so", "lib/libatk-wrapper.so", "lib/libjsound.so"}},
					{From: "/usr/share/tomcat10/bin/bootstrap.jar"},
					{From: "/usr/share/tomcat10/bin/tomcat-juli.jar"},
					{From: "/usr/share/tomcat10/lib"},
					// The JSP compiler, which Debian's jasper.jar names in its
					// Class-Path beside itself.
					{From: "/usr/share/java/eclipse-jdt-core.jar", To: "/usr/share/tomcat10/lib/eclipse-jdt-core.jar"},
					{From: "/usr/share/tomcat10/etc/web.xml", To: "/tomcat/conf/web.xml"},
					{From: "/usr/share/tomcat10/etc/catalina.properties", To: "/tomcat/conf/catalina.properties"},
					{From: "/usr/share/tomcat10-admin/manager"},
					{From: "test/e2e/testdata/tomcat", To: "/tomcat"},
				},
				LibrariesOf:  []string{jdk + "/bin/java", jdk + "/lib/*.so", jdk + "/lib/server/*.so"},
				WritableDirs: []string{"/tomcat/logs", "/tomcat/temp", "/tomcat/work"},
			},
			Entrypoint: []string{jdk + "/bin/java",
				"-Dcatalina.home=/usr/share/tomcat10", "-Dcatalina.base=/tomcat", "-Djava.io.tmpdir=/tomcat/temp",
				"-Djava.util.logging.manager=org.apache.juli.ClassLoaderLogManager", "-Djava.util.logging.config.file=/tomcat/conf/logging.properties",
				"-cp", "/usr/share/tomcat10/bin/bootstrap.jar:/usr/share/tomcat10/bin/tomcat-juli.jar",
				"org.apache.catalina.startup.Bootstrap", "start"},
			Test: true,
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
