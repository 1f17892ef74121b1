package drivers_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/stickydrain/stickydrain/controller/backend"
	"github.com/stickydrain/stickydrain/controller/backend/haproxy"
	"github.com/stickydrain/stickydrain/controller/config"
	"github.com/stickydrain/stickydrain/controller/drivers"
	"github.com/stickydrain/stickydrain/controller/plan"
)

func TestTheBuildRegistersEveryBackend(t *testing.T) {
	if got, want := drivers.New().Types(), []string{"haproxy", "nginx-plus"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("types %v, want %v", got, want)
	}
}

func TestTheRegistryRefusesTwoDriversOfOneKind(t *testing.T) {
	if _, err := backend.NewRegistry(haproxy.Driver{}, haproxy.Driver{}); err == nil {
		t.Error("two drivers of type haproxy were registered")
	}
	if _, err := backend.NewRegistry(haproxy.Driver{}, fake{typ: "other", field: "haproxy"}); err == nil {
		t.Error("two drivers claiming the haproxy options were registered")
	}
}

func TestCheckTypeNamesTheField(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"unknown type", `loadBalancers: [{name: a, type: f5, instances: {static: ["tcp://h:1"]}}]`, `loadBalancers[0].type: Unsupported value: "f5": supported values: "haproxy", "nginx-plus"`},
		{"another type's options", `loadBalancers: [{name: a, type: nginx-plus, haproxy: {readyMap: /r.map}, instances: {static: ["http://h:1/api"]}}]`, `loadBalancers[0].haproxy: Forbidden: only for type haproxy`},
		{"an haproxy address on nginx-plus", `loadBalancers: [{name: a, type: nginx-plus, instances: {static: ["tcp://h:1"]}}]`, `loadBalancers[0].instances.static[0]: Invalid value: "tcp://h:1": want http(s)://host:port/api`},
		{"bad api version", `loadBalancers: [{name: a, type: nginx-plus, nginxPlus: {apiVersion: 3}, instances: {static: ["http://h:1/api"]}}]`, `loadBalancers[0].nginxPlus.apiVersion: Invalid value: 3: not supported; want 4 to 9`},
		{"a client certificate without its key", `loadBalancers: [{name: a, type: nginx-plus, nginxPlus: {certFile: /tls/tls.crt}, instances: {static: ["https://h:1/api"]}}]`, `loadBalancers[0].nginxPlus.keyFile: Required value: set certFile and keyFile`},
		{"a relative certificate path", `loadBalancers: [{name: a, type: nginx-plus, nginxPlus: {certFile: tls.crt, keyFile: /tls/tls.key}, instances: {static: ["https://h:1/api"]}}]`, `loadBalancers[0].nginxPlus.certFile: Invalid value: "tls.crt": want the absolute path`},
		{"a client certificate over http", `loadBalancers: [{name: a, type: nginx-plus, nginxPlus: {certFile: /tls/tls.crt, keyFile: /tls/tls.key}, instances: {static: ["http://h:1/api"]}}]`, `loadBalancers[0].instances.static[0]: Invalid value: "http://h:1/api": nginxPlus's TLS settings need https://host:port/api addresses`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.yaml), drivers.New())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestANewBackendIsOneDriver: a type the configuration did not know is
// accepted, checked and instantiated once its driver is registered — no
// other package changes.
func TestANewBackendIsOneDriver(t *testing.T) {
	r, err := backend.NewRegistry(haproxy.Driver{}, fake{typ: "toy"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`loadBalancers: [{name: a, type: toy, instances: {static: ["toy://one"]}}]`), r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse([]byte(`loadBalancers: [{name: a, type: toy, instances: {static: ["tcp://h:1"]}}]`), r); err == nil || !strings.Contains(err.Error(), "not a toy address") {
		t.Fatalf("the toy driver's address check was not asked: %v", err)
	}
	inst, err := r.New(cfg.LoadBalancers[0], "toy://one", logr.Discard())
	if err != nil || inst.ID() != "toy://one" {
		t.Fatalf("New: %v, %v", inst, err)
	}
}

// TestNoPackageDecidesByTypeOutsideTheDrivers: the controller's packages
// ask the registry; only a backend's own package knows its type.
func TestNoPackageDecidesByTypeOutsideTheDrivers(t *testing.T) {
	decides := regexp.MustCompile(`\.Type\s*(==|!=)|switch\s+\w+\.Type\b|"(haproxy|nginx-plus)"\s*:?\s*$`)
	root := ".."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "backend" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "lb.Type") && decides.MatchString(line) {
				t.Errorf("%s:%d decides by load-balancer type: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fake is a driver of a made-up type.
type fake struct{ typ, field string }

func (f fake) Type() string         { return f.typ }
func (f fake) OptionsField() string { return f.field }
func (f fake) Validate(path *field.Path, lb config.LoadBalancer) field.ErrorList {
	var errs field.ErrorList
	for j, a := range lb.Instances.Static {
		if !strings.HasPrefix(a, "toy://") {
			errs = append(errs, field.Invalid(path.Child("instances", "static").Index(j), a, "not a toy address"))
		}
	}
	return errs
}
func (f fake) InstanceAddress(_ config.LoadBalancer, ep netip.AddrPort) string {
	return "toy://" + ep.String()
}
func (f fake) New(_ config.LoadBalancer, addr string, _ logr.Logger) (backend.Instance, error) {
	return toy(addr), nil
}
func (f fake) LostStateHint() string { return "" }

type toy string

func (t toy) ID() string                                          { return string(t) }
func (t toy) Begin(context.Context, string) (backend.Pass, error) { return toyPass{}, nil }

type toyPass struct{}

func (toyPass) Servers() map[netip.AddrPort]plan.State       { return nil }
func (toyPass) Apply(context.Context, []plan.Change) []error { return nil }
func (toyPass) Close()                                       {}
