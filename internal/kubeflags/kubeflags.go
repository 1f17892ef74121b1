// Package kubeflags brings the standard-library flags of the Kubernetes
// libraries into a pflag command line: zap's --zap-* and
// controller-runtime's --kubeconfig, so that they keep working under
// GNU-style parsing (fs.AddGoFlagSet).
package kubeflags

import (
	goflag "flag"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// GoFlags are zap's flags bound to zapOpts, and controller-runtime's
// --kubeconfig (which it registers on the Go command line when it loads).
func GoFlags(zapOpts *zap.Options) *goflag.FlagSet {
	gs := goflag.NewFlagSet("", goflag.ContinueOnError)
	zapOpts.BindFlags(gs)
	if f := goflag.CommandLine.Lookup("kubeconfig"); f != nil {
		gs.Var(f.Value, f.Name, f.Usage)
	}
	return gs
}
