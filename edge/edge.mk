# The edge build (the engine as a WebAssembly module; edge/README.md), included by the Makefile.
#   make wasm          dist/dohfwd.wasm: the engine and DoH handling as a wasip1 reactor
#   make wasm-workers  copies it next to the Workers glue (edge/workers/dohfwd.wasm), with
#                      edge/workers/dohfwd.config.json: dohfwd.yaml there, encoded for the module
#   make edge-check    vets the module for wasip1 and prints its size; run by make test
#   make edge-host     bin/dohfwd-edge: the wazero host (a binary of its own, so dohfwd links no wazero)
#   make wasm-size     what takes the room in the module: code by Go package (edge/wasmsize)
# The module's Go tests (edge/host, edge/workers) run with the other Go tests.

WASM       := dist/dohfwd.wasm
# Packages the module runs only in initialisers or on rare paths (crypto
# and math/big, kept by crypto/tls's initialisers; miekg/dns beside the
# wire path; encoding/json, reflect, fmt, slog ...) are built without
# inlining, which there only adds size: 160 KB of the gzipped module. The
# per-request path (runtime, sync, time, net/netip, engine, doh, otter,
# zerolog) keeps it: with inlining off everywhere the module is 90 KB
# smaller still but answers about half as many requests (bench-edge).
WASM_COLD  := crypto/... math/big encoding/asn1 github.com/miekg/dns golang.org/x/... \
              encoding/json encoding/gob reflect fmt internal/fmtsort log/... mime/... net/url \
              unicode/... vendor/... github.com/maypok86/otter/v2/stats
WASM_GCFLAGS := $(foreach p,$(WASM_COLD),-gcflags=$(p)=-l)
WASM_FLAGS := -buildmode=c-shared -trimpath $(WASM_GCFLAGS) -ldflags "-s -w"
# The WebAssembly 2.0 conversion instructions (wazero and V8 have both):
# Go's code for integer/float conversions is shorter and faster with them.
WASM_ENV   := GOOS=wasip1 GOARCH=wasm GOWASM=satconv,signext

.PHONY: wasm wasm-workers edge-check edge-host wasm-size

# Always handed to go build: its cache makes an unchanged module quick.
# edge/moduletest builds the hosts' tests' module with this target.
wasm:
	@mkdir -p dist
	$(WASM_ENV) $(GO) build $(WASM_FLAGS) -o $(WASM) ./edge/module
	@echo "$(WASM): $$(stat -c %s $(WASM)) bytes raw, $$(gzip -9c $(WASM) | wc -c) bytes gzipped"

# The module reads no YAML: its configuration is encoded by the host
# (dohfwd-edge -encode-config), which reports the file's errors by line.
wasm-workers: wasm
	cp $(WASM) edge/workers/dohfwd.wasm
	$(GO) run ./cmd/dohfwd-edge -encode-config -config edge/workers/dohfwd.yaml > edge/workers/dohfwd.config.json

# The same module with its name section (no -s -w), which wasmsize reads.
wasm-size:
	@mkdir -p dist
	$(WASM_ENV) $(GO) build -buildmode=c-shared -trimpath $(WASM_GCFLAGS) -o dist/dohfwd-names.wasm ./edge/module
	$(GO) run ./edge/wasmsize dist/dohfwd-names.wasm

edge-host:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/dohfwd-edge ./cmd/dohfwd-edge

edge-check: wasm
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./edge/module ./edge/abi

TEST_EXTRA += edge-check
