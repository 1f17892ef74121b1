// Command cert-manager runs the parts of cert-manager that stickydrain's
// install uses, from cert-manager's own packages, in one process: the
// controllers that issue a Certificate from a self-signed or CA Issuer
// (issuers, certificate requests for both, the approver, and the
// certificates trigger, key manager, request manager, issuing, readiness and
// revision manager controllers), and the CA injector for webhook
// configurations. The module proxy serves cert-manager's main module but not
// its commands, so the real-node tests run this thin main as a pod, as
// cert-manager's own integration tests drive its controllers.
//
// Left out of cert-manager's own binaries: its admission webhook (defaulting
// and validation beyond the CRDs' schemas, conversion), the ACME, Vault and
// Venafi issuers, the ingress and Gateway certificate shims, the
// CertificateSigningRequest controllers, leader election, the metrics and
// health servers, and the configuration file. Everything it does is done by
// cert-manager's code, not by this file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// The controllers register themselves with controllerpkg when imported.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	// The issuer types the issuers controller sets up.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	// A flag set of its own: controller-runtime registers --kubeconfig on
	// the process-wide one.
	fs := flag.NewFlagSet("cert-manager", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; empty means in-cluster")
	namespace := fs.String("cluster-resource-namespace", "cert-manager", "namespace of ClusterIssuers' Secrets")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, *kubeconfig, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager:", err)
		os.Exit(1)
	}
}

// Run runs the controllers and the CA injector until ctx ends.
func Run(ctx context.Context, kubeconfig, clusterResourceNamespace string) error {
	ctx = logf.NewContext(ctx, klog.Background(), "cert-manager")
	log := logf.FromContext(ctx)
	ctrl.SetLogger(klog.Background())

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:    kubeconfig,
		IssuerOptions: controllerpkg.IssuerOptions{ClusterResourceNamespace: clusterResourceNamespace},
		// cert-manager's defaults.
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return fmt.Errorf("building the controllers' context: %w", err)
	}
	var names []string
	for n := range controllerpkg.Known() {
		names = append(names, n)
	}
	sort.Strings(names)
	var wg sync.WaitGroup
	errs := make(chan error, len(names)+1)
	for _, n := range names {
		c, err := controllerpkg.Known()[n](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", n, err)
		}
		log.Info("starting controller", "controller", n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(5, ctx); err != nil {
				errs <- fmt.Errorf("controller %s: %w", n, err)
			}
		}()
	}
	// The controllers have registered their informers: start them.
	cctx, err := factory.Build()
	if err != nil {
		return err
	}
	cctx.SharedInformerFactory.Start(ctx.Done())
	cctx.KubeSharedInformerFactory.Start(ctx.Done())
	cctx.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())

	// The CA injector, on a controller-runtime manager of its own.
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, cmscheme.AddToScheme, apiext.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	mgr, err := ctrl.NewManager(cctx.RESTConfig, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return fmt.Errorf("cainjector manager: %w", err)
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			// cert-manager's names for MutatingWebhookSetup and
			// ValidatingWebhookSetup.
			"mutatingwebhookconfiguration":   true,
			"validatingwebhookconfiguration": true,
		},
	}); err != nil {
		return fmt.Errorf("cainjector: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		log.Info("starting the CA injector")
		if err := mgr.Start(ctx); err != nil {
			errs <- fmt.Errorf("cainjector: %w", err)
		}
	}()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}
