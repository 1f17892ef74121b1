//go:build stickydrain_envoy_gateway_tree

// Command stickydrain-eg-translate runs Envoy Gateway's own translators —
// Gateway API to its intermediate representation, then to xDS, as its
// control plane does — on Kubernetes objects read as YAML from stdin, and
// writes the xDS resources as JSON (proto field names) to stdout.
//
// It differs from `egctl x translate` in one way that matters here: it
// reads EndpointSlices and routes to endpoints, as the control plane does
// (egctl routes to each Service's cluster IP and ignores EndpointSlices),
// so that a terminating endpoint shows as DRAINING. EnvoyPatchPolicies are
// enabled, as they must be in Envoy Gateway's configuration for
// stickydrain's integration. Every resource is checked with
// go-control-plane's validation (ValidateAll).
//
// It is built inside a copy of Envoy Gateway's module (its packages are
// internal) by test/peers/build.sh; the build tag keeps it out of this
// repository's own builds.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	discoveryv1 "k8s.io/api/discovery/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"github.com/envoyproxy/gateway/internal/gatewayapi"
	"github.com/envoyproxy/gateway/internal/gatewayapi/resource"
	"github.com/envoyproxy/gateway/internal/logging"
	"github.com/envoyproxy/gateway/internal/xds/translator"
)

// Output is what is written.
type Output struct {
	// XDS holds, for each xDS IR key (one per Gateway), each xDS type's
	// resources by their type URL.
	XDS map[string]map[string][]json.RawMessage `json:"xds"`
	// Errors are the translators' errors.
	Errors []string `json:"errors,omitempty"`
	// Invalid are the resources go-control-plane's validation refused.
	Invalid []string `json:"invalid,omitempty"`
	// PatchPolicies are the EnvoyPatchPolicies' statuses as the translator
	// set them.
	PatchPolicies []json.RawMessage `json:"patchPolicies,omitempty"`
}

func main() {
	ns := flag.String("controller-namespace", "envoy-gateway-system", "Envoy Gateway's namespace: where it reads its own Secrets (envoy, the certificate Envoy presents to it)")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *ns); err != nil {
		fmt.Fprintln(os.Stderr, "stickydrain-eg-translate:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, w io.Writer, controllerNS string) error {
	raw, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	res, err := resource.LoadResourcesFromYAMLBytes(raw, false, nil)
	if err != nil {
		return fmt.Errorf("loading the objects: %w", err)
	}
	if res.GatewayClass == nil {
		return errors.New("no GatewayClass in the input")
	}
	if res.EndpointSlices, err = endpointSlices(raw); err != nil {
		return err
	}
	logger := logging.DefaultLogger(io.Discard, egv1a1.LogLevelInfo)
	gt := &gatewayapi.Translator{
		GatewayControllerName:   string(res.GatewayClass.Spec.ControllerName),
		GatewayClassName:        gwapiv1.ObjectName(res.GatewayClass.Name),
		ControllerNamespace:     controllerNS,
		EnvoyPatchPolicyEnabled: true,
		BackendEnabled:          true,
		Logger:                  logger,
	}
	ir, err := gt.Translate(context.Background(), res)
	out := Output{XDS: map[string]map[string][]json.RawMessage{}}
	if err != nil {
		out.Errors = append(out.Errors, "gateway-api: "+err.Error())
	}
	keys := make([]string, 0, len(ir.XdsIR))
	for k := range ir.XdsIR {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		xt := &translator.Translator{ControllerNamespace: controllerNS, Logger: logger}
		table, err := xt.Translate(context.Background(), ir.XdsIR[k])
		if err != nil {
			out.Errors = append(out.Errors, k+": "+err.Error())
		}
		if table == nil {
			continue
		}
		byType := map[string][]json.RawMessage{}
		for typ, rs := range table.XdsResources {
			for _, r := range rs {
				if v, ok := r.(interface{ ValidateAll() error }); ok {
					if err := v.ValidateAll(); err != nil {
						out.Invalid = append(out.Invalid, fmt.Sprintf("%s %s: %v", k, typ, err))
					}
				}
				b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(r.(proto.Message))
				if err != nil {
					return fmt.Errorf("writing a %s: %w", typ, err)
				}
				byType[typ] = append(byType[typ], b)
			}
		}
		out.XDS[k] = byType
		for _, s := range table.EnvoyPatchPolicyStatuses {
			b, err := json.Marshal(s)
			if err != nil {
				return fmt.Errorf("writing an EnvoyPatchPolicy status: %w", err)
			}
			out.PatchPolicies = append(out.PatchPolicies, b)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// endpointSlices are the EndpointSlices among the input's documents.
func endpointSlices(raw []byte) ([]*discoveryv1.EndpointSlice, error) {
	var out []*discoveryv1.EndpointSlice
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the input's documents: %w", err)
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("reading a document's kind: %w", err)
		}
		if head.Kind != "EndpointSlice" {
			continue
		}
		var s discoveryv1.EndpointSlice
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			return nil, fmt.Errorf("reading an EndpointSlice: %w", err)
		}
		out = append(out, &s)
	}
}
