package params

import (
	"go/build"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/api"
)

// TestTheTableIsTheFlagSet: every parameter of api.Params is a flag of
// `drainctl wait` with the table's default and help, and every flag is in
// the table — the docs, the webhook and drainctl read one list.
func TestTheTableIsTheFlagSet(t *testing.T) {
	fs := NewWait().FlagSet()
	seen := map[string]bool{}
	for _, p := range api.Params() {
		if seen[p.Name] {
			t.Errorf("%s is in the table twice", p.Name)
		}
		seen[p.Name] = true
		f := fs.Lookup(p.Name)
		if f == nil {
			t.Errorf("api.Params has %q; drainctl wait has no such flag", p.Name)
			continue
		}
		if f.DefValue != p.Default {
			t.Errorf("--%s: the table's default is %q, the flag's %q", p.Name, p.Default, f.DefValue)
		}
		if f.Usage != p.Usage {
			t.Errorf("--%s: the flag's help is not the table's", p.Name)
		}
		if p.Annotated != (p.Annotation() != "") || (p.Annotated && p.Annotation() != api.Prefix+p.Name) {
			t.Errorf("--%s: annotation %q", p.Name, p.Annotation())
		}
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if !seen[f.Name] {
			t.Errorf("drainctl wait has --%s; api.Params does not list it", f.Name)
		}
	})
	for _, a := range []string{api.AnnotationURL, api.AnnotationFormat, api.AnnotationMaxWait, api.AnnotationInsecureTLS, api.AnnotationLogFormat} {
		p, ok := api.Lookup(strings.TrimPrefix(a, api.Prefix))
		if !ok || p.Annotation() != a {
			t.Errorf("%s is not an annotated parameter of the table", a)
		}
	}
}

// TestTheContractImportsOnlyTheStandardLibrary: drainctl, a static binary
// in every opted-in pod, imports package api; api and api/params must not
// pull Kubernetes (or anything but the standard library and pflag) in.
func TestTheContractImportsOnlyTheStandardLibrary(t *testing.T) {
	for dir, allowed := range map[string][]string{
		"..": nil,
		".":  {"github.com/spf13/pflag", "github.com/stickydrain/stickydrain/api"},
	} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			std := !strings.Contains(strings.Split(imp, "/")[0], ".")
			ok := std
			for _, a := range allowed {
				ok = ok || imp == a
			}
			if !ok {
				t.Errorf("package %s imports %s", pkg.ImportPath, imp)
			}
		}
	}
}

// TestNoBinaryImportsAnother: the webhook and the controller share the
// contract through api, not through drainctl's packages (nor each
// other's); drainctl imports neither.
func TestNoBinaryImportsAnother(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	const mod = "github.com/stickydrain/stickydrain/"
	for bin, others := range map[string][]string{
		"webhook":    {"drainctl", "controller"},
		"controller": {"drainctl", "webhook"},
		"drainctl":   {"webhook", "controller"},
	} {
		out, err := exec.Command("go", "list", "-deps", mod+bin+"/...").Output()
		if err != nil {
			t.Fatalf("go list %s: %v", bin, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, o := range others {
				if strings.HasPrefix(dep, mod+o+"/") || dep == mod+o {
					t.Errorf("%s imports %s", bin, dep)
				}
			}
		}
	}
}
