# stickydrain — see README.md. `make help` lists the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X github.com/stickydrain/stickydrain/drainctl/cli.Version=$(VERSION)
SD_LDFLAGS := -s -w -X github.com/stickydrain/stickydrain/internal/version.Version=$(VERSION)
# Go packages of the main module whose tests run in `make test`.
PKGS      ?= ./...
# make test-unit runs one package more at a time than there are cores (go
# test's default is as many): the unit tests sleep and wait on processes
# while the next -race test binary links (93-109 s with 3, 119-125 s with
# 2, on this project's two-core machine).
UNIT_P    ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
TEST_TIMEOUT ?= 40m

##@ Getting started

.PHONY: help
help: ## Show this help, grouped.
	@awk 'BEGIN {FS = ":.*##"} \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } \
	  /^[a-zA-Z0-9_.-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: demo
demo: deps k8s-bins ## Run the rolling-update demo on a local control plane (root; Ctrl-C cleans up); LB=haproxy-ingress or LB=traefik runs it behind that ingress; NODE=real on a real kubelet, containerd and runc.
	STICKYDRAIN_K8S_BINS="$$(test/tools/build.sh)" $(if $(filter real,$(NODE)),STICKYDRAIN_CONTAINERD="$$(test/tools/containerd.sh)") \
	  $(GO) run ./test/e2e/cmd/demo --lb=$(or $(LB),haproxy) --node=$(or $(NODE),podhost)

##@ Development

.PHONY: build
build: ## Build every command that exists into ./bin (static, stripped).
	@mkdir -p $(BIN)
	# drainctl only talks HTTP/1.1 to its own pod: leaving out net/http's
	# HTTP/2 keeps the binary copied into every pod under 8 MiB.
	CGO_ENABLED=0 $(GO) build -tags nethttpomithttp2 -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/drainctl ./drainctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(SD_LDFLAGS)' -o $(BIN)/webhook ./webhook
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/stickydrain-certs ./certs/cmd/stickydrain-certs
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(SD_LDFLAGS)' -o $(BIN)/controller ./controller
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -X main.Version=$(VERSION)' -o $(BIN)/kubectl-stickydrain ./plugin/cmd/kubectl-stickydrain

.PHONY: images
images: ## Build the stickydrain and drainctl images without a container engine into bin/images: multi-platform OCI layouts, a tarball per platform for `ctr images import`, images.txt with every digest (PLATFORMS=linux/amd64,linux/arm64, IMAGES=…, REPO=ghcr.io/stickydrain).
	cd tools/images && $(GO) run . build --root ../.. --out "$(abspath $(BIN))/images" --version $(VERSION) \
	  $(if $(PLATFORMS),--platforms $(PLATFORMS)) $(if $(IMAGES),--images $(IMAGES)) $(if $(REPO),--repo $(REPO))

.PHONY: test-images
test-images: ## Build the images the real-node tests run (pause, sessionapp, drainctl, stickydrain, cert-manager, tomcat from Debian's files; this machine's platform) into bin/test-images, from this checkout.
	@# The repository and tag test/node's ImageRepo and ImageTag name.
	set -o pipefail; cd tools/images && $(GO) run . build --root ../.. --out "$(abspath $(BIN))/test-images" --repo ghcr.io/stickydrain --version e2e \
	  --platforms linux/$$($(GO) env GOARCH) --images pause,sessionapp,drainctl,stickydrain,cert-manager,tomcat 2>&1 | sed 's/^/test image /'

.PHONY: push
push: ## Push the images make images built to REPO (e.g. REPO=registry.example.com/stickydrain), with ~/.docker/config.json's credentials; prints each reference with its digest.
	cd tools/images && $(GO) run . push --out "$(abspath $(BIN))/images" --repo "$(REPO)"

.PHONY: release-rehearsal
release-rehearsal: deps ## What a release publishes, rehearsed here (tools/release/rehearsal.sh): the release workflow's script against a Distribution registry on loopback: images pushed by digest, SPDX SBOMs attested, images and chart signed with cosign (a key made for it, no transparency log), the chart pinned and pushed; every signature and pin verified, each reference printed.
	tools/release/rehearsal.sh

.PHONY: fmt
fmt: ## Format all Go code with gofmt.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet on both modules.
	$(GO) vet ./...
	cd test/tools && $(GO) vet -tags tools ./...
	cd tools/images && $(GO) vet ./...
	cd tools/helm && $(GO) vet ./...
	cd tools/dashboards && $(GO) vet ./...

.PHONY: lint
lint: ## gofmt check, go vet, staticcheck, actionlint on the workflows, helm lint on the chart.
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd tools/images && $(GO) vet ./...
	cd tools/helm && $(GO) vet ./...
	cd tools/dashboards && $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	$(GO) run github.com/rhysd/actionlint/cmd/actionlint@v1.7.12 -color=false .github/workflows/*.yaml
	cd tools/helm && $(GO) test -count=1 -run '^TestHelmLint$$' ./...

##@ Testing

.PHONY: test
test: deps test-unit test-parts ## Unit, integration and end-to-end tests (-race) on a real local control plane, against HAProxy 2.6, 3.0 and 3.2, haproxy-ingress and Traefik, and on a real node (kubelet, containerd, runc).
	@# The unit tier runs first (make runs prerequisites in order): a
	@# failure there stops the run before anything is built for the others.
	@# Each part is asked for first: one that fails (an HAProxy version of
	@# the matrix missing, say) fails the run, never leaves a test to fall
	@# back on what the machine has. Four lanes at once (test/tools/test-lanes.sh):
	@# test/e2e in two, every other package one at a time (-p 1) in the third,
	@# the tools modules and the benchmarks in the fourth. The unit tier runs
	@# again there, without -short (about 1.5 min warm).
	k8s="$$(test/tools/build.sh)" && haproxy="$$(test/tools/haproxy.sh)" && peers="$$(test/peers/build.sh)" && \
	  containerd="$$(test/tools/containerd.sh)" && \
	  STICKYDRAIN_K8S_BINS="$$k8s" STICKYDRAIN_HAPROXY="$$haproxy" STICKYDRAIN_PEERS="$$peers" STICKYDRAIN_CONTAINERD="$$containerd" \
	  STICKYDRAIN_IMAGES="$(abspath $(BIN))/test-images" test/tools/test-lanes.sh "$(GO)" $(TEST_TIMEOUT) $(PKGS)

.PHONY: test-parts
test-parts: deps ## Build what the tests run (control plane and kubelet, containerd, HAProxy versions, ingress controllers, test images) at once: cold, their downloads and links overlap the others' compiles.
	@$(MAKE) --no-print-directory -j5 k8s-bins containerd haproxy-versions peers test-images

.PHONY: soak
soak: deps k8s-bins haproxy-versions peers ## Chaos soak: sticky users, rollouts and random faults, rotating through every flavour (HAProxy 2.6/3.0/3.2 slots and dynamic with the NGINX Plus emulators, haproxy-ingress, Traefik) for DURATION in all (default 30m; make test runs 40 s each); FLAVOURS=haproxy-3.2-dynamic,traefik picks some. The per-flavour table goes to soak-table.md.
	set -o pipefail; STICKYDRAIN_K8S_BINS="$$(test/tools/build.sh)" STICKYDRAIN_HAPROXY="$$(test/tools/haproxy.sh)" STICKYDRAIN_PEERS="$$(test/peers/build.sh)" \
	  STICKYDRAIN_SOAK_DURATION="$${DURATION:-30m}" STICKYDRAIN_SOAK_FLAVOURS="$(FLAVOURS)" STICKYDRAIN_SOAK_TABLE="$(abspath soak-table.md)" \
	  $(GO) test -race -count=1 -run '^TestSoak$$' -v -timeout 0 ./test/e2e/ 2>&1 | grep -v 'podhost: ' | tee soak.log | grep -E '^(---|===|ok|FAIL)|soak|users:|injected|problem|sessions'
	@cat soak-table.md

.PHONY: test-apps
test-apps: deps ## drainctl against the servers teams run (Debian's Tomcat 10.1 and PHP 8.2, Node with express-session from npm), configured as docs/opting-in.md shows, probes hitting them throughout (make test runs it too).
	$(GO) test -race -count=1 -v -run '^TestApps$$' ./test/apps/

.PHONY: test-unit
test-unit: ## Tier 1: the tests that need no control plane (-short), in a minute or two.
	$(GO) test -race -short -count=1 -p $(UNIT_P) $(PKGS)

.PHONY: test-integration
test-integration: deps test-parts ## Tier 2: every test but the end-to-end scenarios: the packages' tests on a real control plane, HAProxy, the NGINX Plus emulator and the real node, and the tools modules'.
	k8s="$$(test/tools/build.sh)" && haproxy="$$(test/tools/haproxy.sh)" && peers="$$(test/peers/build.sh)" && \
	  containerd="$$(test/tools/containerd.sh)" && \
	  STICKYDRAIN_K8S_BINS="$$k8s" STICKYDRAIN_HAPROXY="$$haproxy" STICKYDRAIN_PEERS="$$peers" STICKYDRAIN_CONTAINERD="$$containerd" \
	  STICKYDRAIN_IMAGES="$(abspath $(BIN))/test-images" test/tools/test-lanes.sh "$(GO)" $(TEST_TIMEOUT) $$($(GO) list $(PKGS) | grep -v '/test/e2e$$')

.PHONY: test-e2e
test-e2e: deps test-parts ## Tier 3: the end-to-end scenarios alone (test/e2e, two lanes): users holding sessions through rollouts, faults and the soak's short rotation.
	k8s="$$(test/tools/build.sh)" && haproxy="$$(test/tools/haproxy.sh)" && peers="$$(test/peers/build.sh)" && \
	  containerd="$$(test/tools/containerd.sh)" && \
	  STICKYDRAIN_K8S_BINS="$$k8s" STICKYDRAIN_HAPROXY="$$haproxy" STICKYDRAIN_PEERS="$$peers" STICKYDRAIN_CONTAINERD="$$containerd" \
	  STICKYDRAIN_IMAGES="$(abspath $(BIN))/test-images" STICKYDRAIN_LANES_TOOLS=0 test/tools/test-lanes.sh "$(GO)" $(TEST_TIMEOUT) ./test/e2e/

.PHONY: docs
docs: ## Write the reference pages of docs/reference from the code (annotations, flags, configuration, metrics, exit statuses), and the Grafana dashboard (tools/dashboards).
	$(GO) run ./tools/docgen --out docs/reference
	cd tools/dashboards && $(GO) run . --root ../..

.PHONY: fuzz
fuzz: ## Fuzz the regexp bound, drainctl's parsers, the webhook's annotation parsing, the controller's configuration and upstreams annotation, FUZZTIME each (default 30s).
	@for pkg in ./api/params ./drainctl/source ./webhook/inject ./controller/config ./controller/reconcile; do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-30s} $$pkg || exit 1; \
	  done; \
	done

.PHONY: bench
bench: deps k8s-bins ## Every benchmark (Go benchmarks, admission, drain propagation, scale; ~20 min, root); figures go to bench/results.md.
	STICKYDRAIN_K8S_BINS="$$(test/tools/build.sh)" bash bench/run.sh

.PHONY: deps
deps: ## Install what the tests need on a fresh machine (Debian packages).
	@bash test/deps.sh

.PHONY: k8s-bins
k8s-bins: ## Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubelet into the cache (~16 min cold).
	@dir="$$(test/tools/build.sh)" && echo "control-plane binaries: $$dir"

.PHONY: containerd
containerd: deps ## Build containerd, its runc shim and ctr (2.4.2, from its module) into the cache, for the real node (~3 min cold).
	@dir="$$(test/tools/containerd.sh)" && echo "containerd: $$dir"

.PHONY: haproxy-versions
haproxy-versions: deps ## Provide HAProxy 3.0 (built from source, ~80 s cold) and 3.2 (Debian forky's) beside Debian's 2.6, in the cache.
	@test/tools/haproxy.sh | sed 's/^/haproxy /'

.PHONY: promtool
promtool: ## Build promtool (Prometheus' module, without its service discovery) into the cache, for the alerts' tests (which build it themselves when missing).
	@echo "promtool: $$(test/tools/promtool.sh)"

.PHONY: peers
peers: ## Build haproxy-ingress (~2 min cold), Traefik (~6 min cold, 3 GB) and Envoy Gateway's translators (~5 min cold) from source into the cache, for the ingress and Envoy Gateway tests.
	@test/peers/build.sh | sed 's/^/peer /'

.PHONY: clean
clean: ## Remove ./bin (the binary cache outside the checkout stays).
	rm -rf $(BIN)
