# The edge build (issue 6), included by the Makefile.
#   make wasm          dist/dohfwd.wasm: the engine and DoH handling as a wasip1 reactor
#   make wasm-workers  copies it next to the Workers glue (edge/workers/dohfwd.wasm)
#   make edge-check    vets the module for wasip1 and prints its size; run by make test
#   make edge-host     bin/dohfwd-edge: the wazero host (a binary of its own, so dohfwd links no wazero)
#   make wasm-size     what takes the room in the module: code by Go package (edge/wasmsize)
# The module's Go tests (edge/host, edge/workers) run with the other Go tests.

WASM       := dist/dohfwd.wasm
WASM_FLAGS := -buildmode=c-shared -trimpath -ldflags "-s -w"
# The WebAssembly 2.0 conversion instructions (wazero and V8 have both):
# Go's code for integer/float conversions is shorter and faster with them.
WASM_ENV   := GOOS=wasip1 GOARCH=wasm GOWASM=satconv,signext

.PHONY: wasm wasm-workers edge-check edge-host wasm-size

# Always handed to go build: its cache makes an unchanged module quick.
wasm:
	@mkdir -p dist
	$(WASM_ENV) $(GO) build $(WASM_FLAGS) -o $(WASM) ./edge/module
	@echo "$(WASM): $$(stat -c %s $(WASM)) bytes raw, $$(gzip -9c $(WASM) | wc -c) bytes gzipped"

wasm-workers: wasm
	cp $(WASM) edge/workers/dohfwd.wasm

# The same module with its name section (no -s -w), which wasmsize reads.
wasm-size:
	@mkdir -p dist
	$(WASM_ENV) $(GO) build -buildmode=c-shared -trimpath -o dist/dohfwd-names.wasm ./edge/module
	$(GO) run ./edge/wasmsize dist/dohfwd-names.wasm

edge-host:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/dohfwd-edge ./cmd/dohfwd-edge

edge-check: wasm
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./edge/module ./edge/abi

TEST_EXTRA += edge-check
