//go:build tools

// Package tools pins the packages of haproxy-ingress's main package
// (github.com/jcmoraisjr/haproxy-ingress/pkg), which test/peers/build.sh
// builds, so that go.mod and go.sum hold everything it needs.
package tools

import (
	_ "github.com/jcmoraisjr/haproxy-ingress/pkg/controller/config"
	_ "github.com/jcmoraisjr/haproxy-ingress/pkg/controller/launch"
)
