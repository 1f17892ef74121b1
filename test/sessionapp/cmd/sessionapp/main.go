// Command sessionapp runs the sample session-bound application (see package
// sessionapp). On SIGTERM it turns unready and, unlike a plain server,
// keeps serving its sessions until they end or --shutdown-timeout passes,
// as a servlet container does while its sessions are drained.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	flag "github.com/spf13/pflag" // GNU-style flags, as every stickydrain binary

	"github.com/stickydrain/stickydrain/test/sessionapp"
)

func main() {
	listen := flag.String("listen", ":8080", "`address` to serve on")
	pod := flag.String("pod", os.Getenv("POD_NAME"), "pod `name` told in responses (default $POD_NAME, else the hostname)")
	version := flag.String("version", "v1", "application `version` told in responses")
	idle := flag.Duration("idle-timeout", 30*time.Minute, "sessions expire after this idle `duration`")
	shutdown := flag.Duration("shutdown-timeout", 5*time.Second, "after SIGTERM, stop within this `duration`")
	flag.Parse()
	if *pod == "" {
		*pod, _ = os.Hostname()
	}
	app := sessionapp.New(sessionapp.Config{Pod: *pod, Version: *version, IdleTimeout: *idle})
	srv := &http.Server{Addr: *listen, Handler: app.Handler(), ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("sessionapp %s version %s listening on %s (idle timeout %s)\n", *pod, *version, *listen, *idle)
	select {
	case err := <-errc:
		log.Fatalf("sessionapp: %v", err)
	case <-ctx.Done():
	}
	app.SetReady(false)
	fmt.Printf("sessionapp %s: terminating with %d sessions\n", *pod, app.Count())
	sctx, cancel := context.WithTimeout(context.Background(), *shutdown)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Printf("sessionapp: shutdown: %v", err)
	}
}
