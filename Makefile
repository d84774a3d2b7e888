# dohfwd: `make run` starts it on the embedded default, `make test` runs
# every test after installing what the tests need.
#
# Other engineers plug in through make fragments (edge/edge.mk,
# deploy/deploy.mk): they may add targets and append
# target names to TEST_EXTRA, which `make test` runs after the Go tests,
# and package import paths to NORACE_PKGS for packages tested without -race.

SHELL := /bin/bash
# CI may start without HOME; Go's caches and the browsers need one.
HOME ?= /root
export HOME
GOROOT_BIN := /usr/local/go/bin
export PATH := $(GOROOT_BIN):$(shell HOME=$(HOME) PATH=$(GOROOT_BIN):$$PATH go env GOPATH 2>/dev/null)/bin:$(PATH)

# The toolchain at /usr/local/go even when it is not on the caller's PATH
# ($(shell) in GNU make 4.3 does not see the exported PATH above).
GO      ?= $(if $(wildcard $(GOROOT_BIN)/go),$(GOROOT_BIN)/go,go)
MODULE  := github.com/dohfwd/dohfwd
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN     := bin/dohfwd

# Packages without concurrency run without the race detector.
NORACE_PKGS := $(MODULE)/doh/config
# Targets run by `make test` after the Go tests; fragments append to it.
TEST_EXTRA :=

-include edge/edge.mk deploy/deploy.mk

# Native Go fuzz targets, as package:Target. `make test` runs each for
# FUZZTIME_SHORT (their seed corpora also run as plain tests in `unit`);
# `make fuzz FUZZTIME=10m` runs each for longer. A failing input is
# written to the package's testdata/fuzz/ and fails the target.
# FUZZTIME_SHORT is a count of inputs, not a duration: Go 1.26's fuzz
# coordinator can fail a duration run at its end with "context deadline
# exceeded" and no input (go.dev/issue/75804, fixed in Go 1.27); a count
# has no deadline to race (a few seconds per target here).
FUZZ_TARGETS := ./doh:FuzzDoHRequest ./doh:FuzzCheckQuery ./doh:FuzzJSONFromWire \
	./doh:FuzzH3Request ./doh:FuzzH3Fields \
	./doh:FuzzReqDecoder ./doh:FuzzHuffDecode ./doh/config:FuzzParse \
	./engine:FuzzUpstreamReply ./engine/dnswire:FuzzParserAsMiekg \
	./engine/dnswire:FuzzRdataText ./engine/dnswire:FuzzUnpackName ./doh/odoh:FuzzOpen \
	./engine/blocklist:FuzzParseList
FUZZTIME_SHORT ?= 15000x
FUZZTIME ?= 2m
TEST_EXTRA += fuzz-short

.PHONY: all build run test setup lint vet fmt-check unit tagcheck clean fuzz fuzz-short bench

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/dohfwd

run: build
	./$(BIN)

setup:
	scripts/setup.sh

# `make bench`: dohfwd beside dnsdist in one run (scripts/bench-doh.sh),
# ending with the forwarding goals as ratios, met or not. Figures only:
# nothing asserts a speed. Under BENCH_LOCK when that file exists (a
# machine shared by several people); BENCH_ENV passes the script's
# options, e.g. BENCH_ENV="ROUNDS=3 BASE_REV=main".
BENCH_LOCK ?= /work/notes/bench.lock
BENCH_ENV ?= PEER_ROUNDS=1 ROUNDS=3 LOADS="cache-same nocache-distinct"
bench:
	env $(BENCH_ENV) $(if $(wildcard $(BENCH_LOCK)),flock $(BENCH_LOCK)) scripts/bench-doh.sh

vet:
	$(GO) vet ./...

fmt-check:
	@out="$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: vet fmt-check

unit:
	@pkgs="$$($(GO) list ./... | grep -vxF -f <(printf '%s\n' $(NORACE_PKGS)))"; \
	[ -n "$$pkgs" ] || { echo "unit: go list found no packages" >&2; exit 1; }; \
	echo "$(GO) test -race -count=1 -timeout 10m" $$pkgs; \
	$(GO) test -race -count=1 -timeout 10m $$pkgs
	$(GO) test -count=1 -timeout 5m $(NORACE_PKGS)

tagcheck:
	@if [ -x ../shared/tools/tagcheck ]; then ../shared/tools/tagcheck; \
	elif [ "$${CI:-}" = true ] || [ "$${CI:-}" = 1 ]; then echo "tagcheck: ../shared/tools/tagcheck not present under CI=true: FAIL"; exit 1; \
	else echo "tagcheck: ../shared/tools/tagcheck not present, skipped (with CI=true this fails)"; fi

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_SHORT)

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		echo "$(GO) test -run '^$$' -fuzz '^'$$name'$$' -fuzztime $(FUZZTIME) $$pkg"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

test: setup lint unit $(TEST_EXTRA) tagcheck

clean:
	rm -rf bin
