//go:build wasip1

// Command module is dohfwd built as a WebAssembly reactor
// (GOOS=wasip1 GOARCH=wasm, -buildmode=c-shared): the engine and the DoH
// request handling, unchanged, behind a few exports. Its only way to the
// network is the socket interface its host imports (network.go); the
// contract and the layout of what crosses the boundary is package
// edge/abi.
//
// The host calls _initialize, then dohfwd_init once with the configuration
// it read (the server's YAML, checked and encoded by config.Encode: the
// module links no YAML decoder), then dohfwd_poll with the requests,
// questions and socket events as they come (poll.go), and dohfwd_reload
// with the configuration read again on SIGHUP. One instance has one
// engine and answers any number of them at once, as the native server
// does: each is a goroutine, and no import waits, so the module's
// goroutines run while the host is inside dohfwd_poll and wait for its
// events in between. A plain miss takes no goroutine at all when its
// reply ends it: it is begun in the poll that brings it and finished in
// the poll that brings its reply (query.go). A whole HTTP request (the Workers glue's) goes
// through the DoH handler (serve); a DNS question (the wazero host's,
// which runs the DoH front end natively) only through the engine
// (query.go).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"unsafe"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
)

func main() {}

// The instance's state. Exports run one at a time, so no locks.
var (
	buf     = make([]byte, 64<<10) // the buffer shared with the host
	dohfwd  *assembly.Dohfwd
	eng     *engine.Engine
	handler *doh.Handler
	latency = telemetry.NewLatencyTally()
	// network is the engine's sockets: waits the host's events end.
	network = newWaits()
)

//go:wasmexport dohfwd_buffer
func exportBuffer(n uint32) uint32 {
	if int(n) > cap(buf) {
		next := make([]byte, n, max(int(n), 2*cap(buf)))
		copy(next, buf[:cap(buf)])
		buf = next
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(buf[:cap(buf)]))))
}

// setResult leaves out at the start of the buffer and returns its length.
func setResult(out []byte) uint32 {
	exportBuffer(uint32(len(out)))
	return uint32(copy(buf[:cap(buf)], out))
}

//go:wasmexport dohfwd_init
func exportInit(n uint32, flags uint32) uint32 {
	if err := setup(bytes.Clone(buf[:n]), flags); err != nil {
		return setResult([]byte(err.Error()))
	}
	return 0
}

func setup(encoded []byte, flags uint32) error {
	cfg, err := config.Decode(encoded)
	if err != nil {
		return err
	}
	inModule(cfg)
	d, err := assemble(cfg, flags&abi.InitTCPOnly != 0, latency, hostNetwork{network})
	if err != nil {
		return err
	}
	dohfwd, eng, handler = d, d.Engine, d.Handler
	front = frontOf(d, cfg)
	if flags&abi.InitPublishHotEntries != 0 {
		eng.PublishHotEntries(publishHit)
	}
	return nil
}

// front is abi.Status.Front: set by dohfwd_init.
var front abi.Front

// frontOf tells a host whether d's handler answers a plain RFC 8484
// request with nothing but the engine's reply and the headers abi.Front
// lists: not when per-client limits are on (Admit and the engine's share
// need the client, which trusted proxies' headers may name).
func frontOf(d *assembly.Dohfwd, cfg *config.Config) abi.Front {
	l := cfg.Limits
	return abi.Front{
		Path:         d.Handler.Path(),
		Questions:    l.ClientQPS <= 0 && l.ClientInFlight <= 0 && len(d.TrustedProxies) == 0,
		ServerTiming: d.Config.Listen.ServerTiming,
		TraceContext: d.Config.Listen.TraceContext,
	}
}

// inModule changes cfg to what the module runs: nothing may go on after
// a question is answered (the module runs only inside the host's calls),
// so neither the stale client timer nor prefetch (both keep upstream
// questions running in the background). Serve-stale after the attempts
// needs neither.
func inModule(cfg *config.Config) {
	cfg.Cache.StaleAnswerAfter, cfg.Cache.PrefetchMinHits = 0, 0
}

// dohfwd_reload: a SIGHUP reload, the whole configuration as dohfwd_init
// takes it, applied as dohfwd serve applies one (assembly.Dohfwd.Reload:
// the engine's part, or nothing when the engine refuses it; then the
// limits and the log level). The handler's Path and the listen section
// stay as they are, as natively until a restart.
//
//go:wasmexport dohfwd_reload
func exportReload(n uint32) uint32 {
	if err := reload(buf[:n]); err != nil {
		return setResult([]byte(err.Error()))
	}
	return 0
}

func reload(encoded []byte) error {
	if dohfwd == nil {
		return errors.New("dohfwd_init was not called")
	}
	cfg, err := config.Decode(encoded)
	if err != nil {
		return err
	}
	inModule(cfg)
	if err := dohfwd.Reload(cfg); err != nil {
		return err
	}
	dropPublished() // read under the old configuration
	front = frontOf(dohfwd, cfg)
	return nil
}

//go:wasmexport dohfwd_status
func exportStatus() uint32 {
	if eng == nil {
		return setResult([]byte("{}"))
	}
	requests.Lock()
	counts := queryCounts
	requests.Unlock()
	b, _ := json.Marshal(abi.Status{Status: eng.Status(), AttemptLatency: latency.Snapshot(), Queries: counts, Parked: parks.Load(), Front: front})
	return setResult(b)
}

// serve answers the host's request through the DoH handler's core, under
// ctx, which ends when the host reports the client gone. The module links
// no net/http (it would bring crypto/tls): the request becomes a
// doh.Request as the native HTTP/1.1 adapter makes one.
func serve(ctx context.Context, r *abi.Request) abi.Response {
	// The target splits at its first '?', as the native HTTP/2 server
	// splits :path (url.ParseRequestURI cost a few per cent of the
	// module's time for a question).
	if !strings.HasPrefix(r.Target, "/") {
		return abi.Response{Status: statusBadRequest, Body: []byte("bad request target")}
	}
	path, rawQuery, _ := strings.Cut(r.Target, "?")
	req := doh.Request{
		Method:        r.Method,
		Path:          path,
		RawQuery:      rawQuery,
		Proto:         "HTTP/1.1",
		Header:        make(doh.Header, 0, len(r.Headers)),
		ContentLength: int64(len(r.Body)),
		Body:          r.Body,
	}
	if peer, err := netip.ParseAddrPort(r.Remote); err == nil {
		req.Peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	}
	for _, h := range r.Headers {
		if strings.EqualFold(h[0], "Host") {
			req.Host = h[1]
			continue
		}
		name := strings.ToLower(h[0])
		if name == "content-length" {
			// The length the client declared: a host reads no more of a
			// body than a DNS message and a byte, so 413 needs this.
			if n, err := strconv.ParseInt(h[1], 10, 64); err == nil && n > req.ContentLength {
				req.ContentLength = n
			}
		}
		req.Header.Add(name, h[1])
	}
	out, ok := handler.ServeRequest(ctx, &req)
	if !ok {
		return abi.Response{Status: doh.StatusClientClosed}
	}
	resp := abi.Response{Status: out.Status, Body: out.Body, Headers: make([][2]string, len(out.Header))}
	for i, f := range out.Header {
		resp.Headers[i] = [2]string{f.Name, f.Value}
	}
	return resp
}

// The statuses the module answers itself, as net/http names them.
const (
	statusBadRequest         = 400
	statusServiceUnavailable = 503
)
