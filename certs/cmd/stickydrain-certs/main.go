// Command stickydrain-certs writes a self-signed CA and a serving
// certificate for the webhook into a directory (ca.crt, tls.crt, tls.key),
// for local runs and the demo.
package main

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/stickydrain/stickydrain/certs"
	"github.com/stickydrain/stickydrain/internal/cmdline"
)

const synopsis = `stickydrain-certs --dir DIR [flags]

Writes a self-signed CA and a serving certificate for the webhook into DIR
(ca.crt, tls.crt, tls.key), for local runs and the demo.`

// flagSet binds the flags to dir, dns and ips.
func flagSet(dir, dns, ips *string) *pflag.FlagSet {
	fs := cmdline.New("stickydrain-certs")
	fs.StringVar(dir, "dir", "", "`directory` to write ca.crt, tls.crt and tls.key into (required)")
	fs.StringVar(dns, "dns", "localhost", "comma-separated DNS `names`")
	fs.StringVar(ips, "ip", "127.0.0.1", "comma-separated IP `addresses`")
	return fs
}

func main() {
	dir, dns, ips := new(string), new(string), new(string)
	if status, ok := cmdline.Parse(flagSet(dir, dns, ips), synopsis, os.Args[1:], os.Stdout, os.Stderr); !ok {
		os.Exit(status)
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "stickydrain-certs: --dir is required")
		os.Exit(2)
	}
	opts := certs.Options{}
	for _, d := range strings.Split(*dns, ",") {
		if d = strings.TrimSpace(d); d != "" {
			opts.DNSNames = append(opts.DNSNames, d)
		}
	}
	for _, s := range strings.Split(*ips, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		ip := net.ParseIP(s)
		if ip == nil {
			fmt.Fprintf(os.Stderr, "stickydrain-certs: --ip %q is not an IP address\n", s)
			os.Exit(2)
		}
		opts.IPs = append(opts.IPs, ip)
	}
	b, err := certs.Generate(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stickydrain-certs:", err)
		os.Exit(1)
	}
	if err := b.WriteDir(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "stickydrain-certs:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s/{ca.crt,tls.crt,tls.key}, valid until %s\n", *dir, b.NotAfter.Format("2006-01-02"))
}
