// Command floor-drainer is the drain-propagation benchmark's floor: the
// least a drainer must do, with none of stickydrain's controller's work
// (no configuration, no tenancy, no plan, no reading back, no Events, no
// readiness markers). It watches the EndpointSlices of one namespace
// through a client-go informer, as the controller does, and for each
// endpoint the first time it is seen terminating sends one
// `set server <backend>/<server> state drain` on a connection of its own
// to each HAProxy instance at once. Which slot holds an address it reads
// once, at start, from each instance's `show servers state` (the
// benchmark starts it after stickydrain's controller filled the slots).
//
// What stickydrain's controller takes beyond it, from the same watch to
// the same instances, is its own cost.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

func main() {
	fs := pflag.NewFlagSet("floor-drainer", pflag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `file`")
	namespace := fs.String("namespace", "", "the `namespace` whose EndpointSlices are watched")
	sockets := fs.StringSlice("haproxy", nil, "an HAProxy Runtime API unix `socket` (repeat for each instance)")
	ready := fs.String("ready-file", "", "`file` written once the slots are read and the watch is synced")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if *kubeconfig == "" || *namespace == "" || len(*sockets) == 0 {
		fmt.Fprintln(os.Stderr, "floor-drainer: --kubeconfig, --namespace and at least one --haproxy are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace, *sockets, *ready); err != nil {
		fmt.Fprintf(os.Stderr, "floor-drainer: %v\n", err)
		os.Exit(1)
	}
}

// instance is one HAProxy: its socket and which server holds each address.
type instance struct {
	sock  string
	slots map[string]string // address → backend/server
}

func run(ctx context.Context, kubeconfig, namespace string, sockets []string, readyFile string) error {
	var insts []instance
	for _, s := range sockets {
		slots, err := readSlots(s)
		if err != nil {
			return fmt.Errorf("reading the slots of %s: %w", s, err)
		}
		insts = append(insts, instance{sock: s, slots: slots})
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		sent = map[string]bool{} // addresses drained (or found in no slot)
	)
	handle := func(o any) {
		s, ok := o.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		for _, e := range s.Endpoints {
			if !ptr.Deref(e.Conditions.Terminating, false) || len(e.Addresses) == 0 {
				continue
			}
			addr := e.Addresses[0]
			mu.Lock()
			done := sent[addr]
			sent[addr] = true
			mu.Unlock()
			if done {
				continue
			}
			for _, in := range insts {
				srv, ok := in.slots[addr]
				if !ok {
					continue
				}
				go func() {
					if err := command(in.sock, "set server "+srv+" state drain"); err != nil {
						fmt.Fprintf(os.Stderr, "floor-drainer: %s on %s: %v\n", srv, in.sock, err)
					}
				}()
			}
		}
	}
	inf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace))
	si := inf.Discovery().V1().EndpointSlices().Informer()
	if _, err := si.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: handle, UpdateFunc: func(_, o any) { handle(o) }}); err != nil {
		return err
	}
	inf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), si.HasSynced) {
		return errors.New("the EndpointSlice watch never synced")
	}
	if readyFile != "" {
		if err := os.WriteFile(readyFile, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// command sends one Runtime API command on a connection of its own and
// reads the answer to its end.
func command(sock, cmd string) error {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return err
	}
	out, err := io.ReadAll(c)
	if err != nil {
		return err
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		return fmt.Errorf("%q answered %q", cmd, s)
	}
	return nil
}

// readSlots maps each server's address to backend/server from `show
// servers state` (be_id be_name srv_id srv_name srv_addr …).
func readSlots(sock string) (map[string]string, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := io.WriteString(c, "show servers state\n"); err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 5 && !strings.HasPrefix(f[0], "#") && f[4] != "0.0.0.0" {
			out[f[4]] = f[1] + "/" + f[3]
		}
	}
	return out, sc.Err()
}
