package apps

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stickydrain/stickydrain/api"
	"github.com/stickydrain/stickydrain/test/framework"
	"github.com/stickydrain/stickydrain/test/must"
	"github.com/stickydrain/stickydrain/test/proc"
	"github.com/stickydrain/stickydrain/webhook/inject"
)

// tomcat is Debian's Tomcat 10.1 (tomcat10, and tomcat10-admin for the
// manager) in a CATALINA_BASE of its own: the shop's JSPs, the manager
// deployed from Debian's files, a manager-script user whose credentials
// drainctl reads from TOMCAT_MANAGER_CREDENTIALS, as the docs say.
func tomcat() runtime {
	return runtime{
		name:   "tomcat",
		docURL: "/manager/text/list",
		login:  "/shop/login.jsp", use: "/shop/cart.jsp", logout: "/shop/logout.jsp",
		landing: "/shop/", probe: "/shop/health.jsp",
		start: func(t *testing.T, ctx context.Context, dir string, port int) []string {
			const home = "/usr/share/tomcat10"
			need(t, home+"/bin/catalina.sh", "tomcat10")
			need(t, "/usr/share/tomcat10-admin/manager", "tomcat10-admin")
			for _, d := range []string{"conf/Catalina/localhost", "logs", "temp", "work", "webapps"} {
				must.OK(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
			}
			for _, f := range []string{"web.xml", "context.xml", "catalina.properties", "logging.properties"} {
				copyFile(t, filepath.Join(home, "etc", f), filepath.Join(dir, "conf", f))
			}
			write(t, filepath.Join(dir, "conf", "server.xml"), fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<Server port="-1" shutdown="SHUTDOWN">
  <GlobalNamingResources>
    <Resource name="UserDatabase" auth="Container" type="org.apache.catalina.UserDatabase"
        factory="org.apache.catalina.users.MemoryUserDatabaseFactory" pathname="conf/tomcat-users.xml"/>
  </GlobalNamingResources>
  <Service name="Catalina">
    <Connector address="127.0.0.1" port="%d" protocol="HTTP/1.1"/>
    <Engine name="Catalina" defaultHost="localhost">
      <Realm className="org.apache.catalina.realm.UserDatabaseRealm" resourceName="UserDatabase"/>
      <Host name="localhost" appBase="webapps" unpackWARs="false" autoDeploy="false"/>
    </Engine>
  </Service>
</Server>
`, port))
			write(t, filepath.Join(dir, "conf", "tomcat-users.xml"), `<?xml version="1.0" encoding="UTF-8"?>
<tomcat-users xmlns="http://tomcat.apache.org/xml" version="1.0">
  <role rolename="manager-script"/>
  <user username="drain" password="apps-test-only" roles="manager-script"/>
</tomcat-users>
`)
			write(t, filepath.Join(dir, "conf", "Catalina", "localhost", "manager.xml"),
				`<Context docBase="/usr/share/tomcat10-admin/manager" privileged="true" antiResourceLocking="false"/>`+"\n")
			copyDir(t, filepath.Join(testdata(), "tomcat", "shop"), filepath.Join(dir, "webapps", "shop"))
			serve(t, ctx, dir, fmt.Sprintf("http://127.0.0.1:%d/shop/health.jsp", port),
				[]string{"CATALINA_HOME=" + home, "CATALINA_BASE=" + dir, "CATALINA_TMPDIR=" + filepath.Join(dir, "temp"), "CATALINA_PID=" + filepath.Join(dir, "tomcat.pid")},
				home+"/bin/catalina.sh", "run")
			return []string{"TOMCAT_MANAGER_CREDENTIALS=drain:apps-test-only"}
		},
	}
}

// php is Debian's PHP 8.2 CLI server with no php.ini (-n), as the official
// php images run, and session.save_path empty as their build leaves it
// (Debian builds its PHP with /var/lib/php/sessions instead, so the test
// sets it empty): the files handler writes to the system's temporary
// directory (TMPDIR, here the test's).
func php() runtime {
	return runtime{
		name:   "php",
		docURL: "/sessions.php",
		login:  "/login.php", use: "/cart.php", logout: "/logout.php",
		landing: "/index.php", probe: "/health.php",
		// The recipe the docs gave before, session_save_path() alone,
		// reads 0 with every user logged in: a drain would end at
		// min-wait.
		check: func(t *testing.T, base string) {
			c := &http.Client{Timeout: 5 * time.Second}
			if code, body, err := get(c, "GET", base+"/sessions-naive.php"); err != nil || code != 200 || strings.TrimSpace(body) != "0" {
				t.Errorf("session_save_path() alone, no php.ini: %v, status %d, read %q; want 0 (the files are in the temporary directory)", err, code, body)
			}
		},
		start: func(t *testing.T, ctx context.Context, dir string, port int) []string {
			need(t, "/usr/bin/php", "php-cli")
			root := filepath.Join(dir, "www")
			copyDir(t, filepath.Join(testdata(), "php"), root)
			tmp := filepath.Join(dir, "tmp")
			must.OK(t, os.MkdirAll(tmp, 0o755))
			serve(t, ctx, dir, fmt.Sprintf("http://127.0.0.1:%d/health.php", port), []string{"TMPDIR=" + tmp, "PHP_CLI_SERVER_WORKERS=4"},
				"/usr/bin/php", "-n", "-d", "session.save_path=", "-S", fmt.Sprintf("127.0.0.1:%d", port), "-t", root)
			return nil
		},
	}
}

// node is Debian's Node.js with express and express-session from npm
// (test/apps/testdata/node, pinned by its package-lock.json), the session
// store in memory, counted at /sessions as docs/opting-in.md shows.
func node() runtime {
	return runtime{
		name:   "node",
		docURL: "/sessions",
		login:  "/login", use: "/cart", logout: "/logout",
		landing: "/", probe: "/healthz",
		start: func(t *testing.T, ctx context.Context, dir string, port int) []string {
			need(t, "/usr/bin/node", "nodejs")
			mods := nodeModules(t)
			serve(t, ctx, dir, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), []string{fmt.Sprintf("PORT=%d", port), "NODE_PATH=" + filepath.Join(mods, "node_modules")},
				"/usr/bin/node", filepath.Join(testdata(), "node", "server.js"))
			return nil
		},
	}
}

// docArgs resolves the docs/opting-in.md example whose stickydrain.io/url
// ends with suffix, with the webhook's own parser, into drainctl wait's
// arguments; the URL points at port on loopback instead of the pod's 8080.
func docArgs(t *testing.T, suffix string, port int) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "docs", "opting-in.md"))
	must.OK(t, err)
	for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(raw), -1) {
		if !strings.Contains(b[1], "kind: Deployment") {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict([]byte(b[1]), &d); err != nil {
			continue
		}
		ann := d.Spec.Template.Annotations
		if !strings.HasSuffix(ann[api.AnnotationURL], suffix) {
			continue
		}
		spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}
		plan, err := inject.Resolve(&spec, func(k string) (string, bool) { v, ok := ann[k]; return v, ok })
		if err != nil {
			t.Fatalf("docs/opting-in.md's example for %s: the webhook refuses it: %v", suffix, err)
		}
		var args []string
		for _, a := range plan.WaitArgs {
			if u, ok := strings.CutPrefix(a, "--url="); ok {
				a = "--url=" + strings.Replace(u, "localhost:8080", fmt.Sprintf("127.0.0.1:%d", port), 1)
			}
			args = append(args, a)
		}
		return args
	}
	t.Fatalf("docs/opting-in.md shows no Deployment whose %s ends with %s", api.AnnotationURL, suffix)
	return nil
}

// serve starts the server bin in dir with env added, its output in
// dir/server.log, stopped when the test ends, and waits until url answers
// 200 (or fails the test with the end of its log).
func serve(t *testing.T, ctx context.Context, dir, url string, env []string, bin string, args ...string) {
	t.Helper()
	log := filepath.Join(dir, "server.log")
	p, err := proc.StartWith(proc.Options{Dir: dir, Env: env}, log, bin, args...)
	must.OK(t, err)
	t.Cleanup(p.KillGroup)
	if err := proc.WaitHTTP(ctx, url, 90*time.Second); err != nil {
		t.Fatalf("%s never answered: %v; the end of its log:\n%s", url, err, proc.Tail(log, 30))
	}
}

// need fails the test when path, which Debian's package pkg installs, is
// missing: test/deps.sh installs it (make test-apps runs it first).
func need(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: install Debian's %s (test/deps.sh does)", path, pkg)
	}
}

func testdata() string { return filepath.Join(framework.RepoRoot(), "test", "apps", "testdata") }

func write(t *testing.T, path, s string) {
	t.Helper()
	must.OK(t, os.WriteFile(path, []byte(s), 0o644))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must.OK(t, err)
	must.OK(t, os.WriteFile(to, b, 0o644))
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	must.OK(t, os.CopyFS(to, os.DirFS(from)))
}
