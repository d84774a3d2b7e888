// Package server runs dohfwd's listeners around a DoH handler: HTTPS
// (HTTP/2 and HTTP/1.1) and its UDP twin for HTTP/3, the optional plaintext HTTP/1.1 + h2c listener,
// the optional DNS-over-TLS and plain DNS listeners, and the admin
// listener. It reloads the configuration on SIGHUP and drains
// questions in flight on SIGTERM. It serves any DoH handler over any
// Backend, so the native binary and the WebAssembly edge host share it.
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"reflect"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/doh/admin"
	"github.com/dohfwd/dohfwd/doh/config"
	"github.com/dohfwd/dohfwd/doh/internal/certs"
	"github.com/dohfwd/dohfwd/doh/internal/ddr"
	"github.com/dohfwd/dohfwd/doh/internal/dnsserver"
	"github.com/dohfwd/dohfwd/doh/internal/proxied"
	"github.com/dohfwd/dohfwd/doh/internal/quicconf"
	"github.com/dohfwd/dohfwd/doh/internal/rawtcp"
	"github.com/dohfwd/dohfwd/doh/metrics"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/telemetry"
	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// Backend is what the server needs from what answers behind the handler:
// the engine natively, the edge host's pool of module instances.
type Backend interface {
	Status() engine.Status
	InFlight() int64
	// Reload takes a reloaded configuration whole (the edge host's
	// instances each hold, besides an engine, a log level and client
	// limits of their own); on error nothing changes.
	Reload(*config.Config) error
}

// DefaultDrainTimeout bounds the wait for questions in flight at SIGTERM:
// longer than the slowest question (three 2 s attempts).
const DefaultDrainTimeout = 10 * time.Second

// Options are what Run serves.
type Options struct {
	Config  *config.Config
	Handler http.Handler // the DoH handler, served on the HTTPS and HTTP listeners
	Backend Backend
	// Resolver answers the DoT and plain DNS listeners; they need it.
	Resolver dnsserver.Resolver
	// Designate, when set, is told what DDR advertises once the
	// listeners are bound (see ddr.Resolver.Designate).
	Designate func(ddr.Designation)
	Metrics   *metrics.Metrics // served at /metrics; nil = no /metrics
	Certs     certs.Config     // the HTTPS and DoT listeners' certificates (assembly.CertsConfig)
	Log       zerolog.Logger
	Version   string

	// Load reads the configuration again on SIGHUP. Nil re-reads
	// Config.Source, or keeps the embedded default.
	Load func() (*config.Config, error)
	// Limits are the DoH listeners' HTTP limits; zero = doh.DefaultLimits.
	Limits doh.Limits
	// DrainTimeout bounds the drain at SIGTERM; 0 = DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Signals, when set, replaces the process's SIGHUP/SIGTERM/SIGINT.
	Signals <-chan os.Signal
	// OnListen, when set, is told each listener's bound address.
	OnListen func(name string, addr net.Addr)

	// WrapClientListener, when set, wraps every listener of client
	// connections (HTTPS, HTTP, DoT, DNS over TCP) after PROXY protocol,
	// for the connection limits (limits.Limiter.Listen).
	WrapClientListener func(net.Listener) net.Listener
	// Admit, when set, is asked for each DoT, DoQ and plain DNS question
	// (dnsserver.Server.Admit); the DoH handler carries its own.
	Admit func(client netip.Addr) (ok bool, retryAfter time.Duration)
	// HoldConn, when set, counts each QUIC connection against the
	// connection limits, as WrapClientListener counts TCP ones
	// (limits.Limiter.HoldConn).
	HoldConn func(client netip.Addr) (release func(), ok bool)

	// Reloaded, when set, is told of each configuration a SIGHUP reload
	// applied, after the backend took it.
	Reloaded func(*config.Config)
	// Connections, when set, counts the client connections open, for
	// /status.
	Connections func() int64
	// Wiretap, when set, is handed the DoT and plain DNS listeners'
	// questions and answers (dnsserver.Server.Wiretap); the DoH handler
	// carries its own.
	Wiretap wiretap.Tap
	// Dnstap, when set, counts the dnstap messages written and dropped,
	// for /status.
	Dnstap func() (sent, dropped uint64)
}

// httpServer is what Run needs of a listener's server: *http.Server (the
// admin listener) and *doh.Server (the DoH listeners) both are one.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// listener is one running HTTP server (srv), or one DNS server (dns) on a
// stream listener (ln) or a packet connection (pc).
type listener struct {
	name string
	srv  httpServer
	ln   net.Listener

	h3 *doh.H3Server // on pc

	dns *dnsserver.Server
	pc  net.PacketConn
	// quic, with dns, is a DNS-over-QUIC listener (pc is its socket).
	quic dnsserver.QUICListener
	// gate is a QUIC listener's (DoQ or HTTP/3) address-validation policy.
	gate *quicconf.Gate
}

// Run serves until ctx ends or a SIGTERM/SIGINT arrives, then stops
// accepting, waits for requests in flight (bounded by DrainTimeout) and
// returns nil. It returns an error when a listener cannot start.
func Run(ctx context.Context, o Options) error {
	log := o.Log
	cfg := o.Config
	current := new(atomic.Pointer[config.Config])
	current.Store(cfg)
	log.Info().Str("version", o.Version).Str("config", cfg.Source).Int("scopes", len(cfg.Scopes)).
		Msg("starting")

	listeners, closeAll, err := listen(ctx, o, current)
	if err != nil {
		return err
	}
	defer closeAll()
	if path := os.Getenv("DOHFWD_SERVER_CPUPROFILE"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			return err
		}
		defer stop()
	}

	errc := make(chan error, len(listeners))
	errorLog := stdlog.New(telemetry.LineWriter(log), "", 0)
	for _, l := range listeners {
		switch srv := l.srv.(type) {
		case *http.Server:
			srv.ErrorLog = errorLog
		case *doh.Server:
			srv.SetErrorLog(errorLog)
		}
		log.Info().Str("listener", l.name).Str("addr", l.addr().String()).Msg("listening")
		if o.OnListen != nil {
			o.OnListen(l.name, l.addr())
		}
		go func() {
			if err := l.serve(); err != nil {
				errc <- fmt.Errorf("%s listener %s: %w", l.name, l.addr(), err)
			}
		}()
	}

	sigs := o.Signals
	if sigs == nil {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(ch)
		sigs = ch
	}
	reason := "context done"
	var runErr error
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case err := <-errc:
			log.Error().Err(err).Msg("listener failed")
			reason, runErr = "listener failed", err
			break wait
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload(o, current)
				continue
			}
			reason = sig.String()
			break wait
		}
	}
	drain(o, listeners, reason)
	return runErr
}

// listen opens every configured listener; closeAll releases what listen
// made (the certificate manager).
func listen(ctx context.Context, o Options, current *atomic.Pointer[config.Config]) ([]*listener, func(), error) {
	cfg, log := o.Config, o.Log
	var (
		out     []*listener
		closers []func()
	)
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	fail := func(err error) ([]*listener, func(), error) {
		for _, l := range out {
			if l.quic != nil {
				l.quic.Close()
			} else if l.pc != nil {
				l.pc.Close()
			} else {
				l.ln.Close()
			}
		}
		closeAll()
		return nil, func() {}, err
	}
	var certificates *tls.Config // the HTTPS, DoT and DoQ listeners' certificates
	if cfg.Listen.HTTPS != "" {
		// The port is held before ACME starts, so a TLS-ALPN-01 validation
		// always reaches this listener and never a stand-in of certmagic's.
		ln, err := listenDoH(o, "listen.https", cfg.Listen.HTTPS)
		if err != nil {
			return fail(err)
		}
		out = append(out, &listener{name: "https", ln: ln})
	}
	if cfg.Listen.HTTPS != "" || cfg.Listen.DoT != "" || cfg.Listen.DoQ != "" {
		cm, err := certs.New(ctx, o.Certs, log)
		if err != nil {
			return fail(fmt.Errorf("tls: %w", err))
		}
		closers = append(closers, func() { cm.Close() })
		log.Info().Str("mode", cm.Mode()).Str("fingerprint", cm.Fingerprint()).Msg("certificate")
		certificates = cm.TLSConfig()
	}
	if cfg.Listen.HTTPS != "" {
		srv, err := doh.NewTLSServer(o.Handler, certificates, o.Limits)
		if err != nil {
			return fail(err)
		}
		out[len(out)-1].srv = srv
		if cfg.Listen.HTTP3 {
			// HTTP/3 is an upgrade clients find by Alt-Svc: when its UDP
			// port cannot be had, DoH goes on over HTTP/2 and HTTP/1.1,
			// advertising none, rather than the server not starting.
			if h3, err := listenHTTP3(o, out[len(out)-1].ln.Addr(), certificates); err != nil {
				o.Log.Error().Err(err).Msg("HTTP/3 not served; DoH goes on over HTTP/2 and HTTP/1.1 without Alt-Svc")
			} else {
				out = append(out, h3)
			}
		}
	}
	if cfg.Listen.HTTP != "" {
		ln, err := listenDoH(o, "listen.http", cfg.Listen.HTTP)
		if err != nil {
			return fail(err)
		}
		out = append(out, &listener{name: "http", srv: doh.NewPlainServer(o.Handler, o.Limits), ln: ln})
	}
	dnsListeners, err := listenDNS(o, certificates)
	if err != nil {
		return fail(err)
	}
	out = append(out, dnsListeners...)
	transports := transportCounters(out)
	if o.Metrics != nil {
		o.Metrics.CollectTransports(func(yield func(string, *uint64, *uint64)) {
			for name, c := range transports() {
				yield(name, c.Questions, c.QUICRetries)
			}
		})
	}
	if cfg.Listen.Admin != "" {
		ln, err := net.Listen("tcp", cfg.Listen.Admin)
		if err != nil {
			return fail(fmt.Errorf("listen.admin %s: %w", cfg.Listen.Admin, err))
		}
		h := admin.Handler(o.Backend, gatherer(o.Metrics), admin.Info{
			Version: o.Version, Started: time.Now(),
			Config: func() string { return current.Load().Source }, Connections: o.Connections,
			Transports: transports,
			Dnstap:     o.Dnstap,
		})
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
		out = append(out, &listener{name: "admin", srv: srv, ln: ln})
	}
	designate(o, out, certificates)
	return out, closeAll, nil
}

// listenDoH binds a DoH listener (HTTPS, plaintext, DoT). It is the one
// place listeners for client traffic are made: with listen.proxy_protocol
// set, their connections from those balancers must carry a PROXY header,
// and the client address in it is the connection's RemoteAddr, which the
// connection limits (o.WrapClientListener) then count. Its connections
// read and write with raw system calls (rawtcp).
func listenDoH(o Options, key, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", key, addr, err)
	}
	return o.wrapClients(proxied.Listen(rawtcp.Listen(ln), ProxyOptions(o.Config, o.Log))), nil
}

// listenHTTP3 binds the HTTPS listener's UDP twin (tcp's address and
// port) for DoH over HTTP/3 with the same certificates, and has the DoH
// handler advertise it (Alt-Svc) on every HTTP version.
func listenHTTP3(o Options, tcp net.Addr, certificates *tls.Config) (*listener, error) {
	ta, _ := tcp.(*net.TCPAddr)
	if ta == nil {
		return nil, fmt.Errorf("listen.http3: the HTTPS listener's address %s is not TCP", tcp)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: ta.IP, Port: ta.Port, Zone: ta.Zone})
	if err != nil && strings.HasSuffix(o.Config.Listen.HTTPS, ":0") {
		// The TCP port was any free one, and its UDP twin is taken: any
		// free UDP port does, since Alt-Svc says which.
		pc, err = net.ListenUDP("udp", &net.UDPAddr{IP: ta.IP, Zone: ta.Zone})
	}
	if err != nil {
		return nil, fmt.Errorf("listen.http3 (udp %s): %w", ta, err)
	}
	// New connections prove their address with a Retry when they come
	// faster than limits.connections a second, or when too many
	// handshakes of unvalidated addresses are under way (quicconf.Gate).
	gate := &quicconf.Gate{}
	if n := o.Config.Limits.Connections; n > 0 {
		gate.Rate, gate.Burst = float64(n), n
	}
	srv := doh.NewH3Server(o.Handler, certificates, o.Limits, doh.H3Options{HoldConn: o.HoldConn, Gate: gate})
	if h, ok := o.Handler.(*doh.Handler); ok {
		port := pc.LocalAddr().(*net.UDPAddr).Port
		h.SetAltSvc(port, port == ta.Port)
	}
	return &listener{name: "http3", h3: srv, pc: pc, gate: gate}, nil
}

// wrapClients applies WrapClientListener, if any.
func (o Options) wrapClients(ln net.Listener) net.Listener {
	if o.WrapClientListener == nil {
		return ln
	}
	return o.WrapClientListener(ln)
}

// ProxyOptions are the PROXY protocol settings of cfg for proxied.Listen:
// the trusted balancers, and a debug event for each refused connection.
func ProxyOptions(cfg *config.Config, log zerolog.Logger) proxied.Options {
	var o proxied.Options
	for _, s := range cfg.Listen.ProxyProtocol {
		p, err := config.ParsePrefix(s)
		if err != nil {
			continue // validated at load
		}
		o.Trusted = append(o.Trusted, p)
	}
	o.OnRefuse = func(peer netip.AddrPort, err error) {
		log.Debug().Str("peer", peer.String()).Err(err).Msg("connection refused: PROXY protocol header")
	}
	return o
}

// reload applies a new configuration file: scopes, servers, hosts, engine
// values, the limits (Reloaded) and the log level. A file that does not
// load, or that the engine refuses, is logged and the running
// configuration stays. The backend gets the whole file.
func reload(o Options, current *atomic.Pointer[config.Config]) {
	log := o.Log
	old := current.Load()
	load := o.Load
	if load == nil {
		load = func() (*config.Config, error) {
			if old.Source == config.DefaultSource {
				return config.Default()
			}
			return config.Load(old.Source)
		}
	}
	next, err := load()
	if err != nil {
		log.Error().Err(err).Str("config", old.Source).Msg("reload rejected: keeping the running configuration")
		return
	}
	if err := o.Backend.Reload(next); err != nil {
		log.Error().Err(err).Str("config", next.Source).Msg("reload rejected: keeping the running configuration")
		return
	}
	current.Store(next)
	if o.Reloaded != nil {
		o.Reloaded(next)
	}
	if next.Listen.HTTPS != old.Listen.HTTPS || next.Listen.HTTP3 != old.Listen.HTTP3 || next.Listen.HTTP != old.Listen.HTTP || next.Listen.DoT != old.Listen.DoT ||
		next.Listen.DoQ != old.Listen.DoQ ||
		next.Listen.DNS != old.Listen.DNS || !reflect.DeepEqual(next.DDR, old.DDR) ||
		next.Listen.Admin != old.Listen.Admin || next.Listen.Path != old.Listen.Path ||
		!reflect.DeepEqual(next.Listen.TrustedProxies, old.Listen.TrustedProxies) ||
		!reflect.DeepEqual(next.Listen.ProxyProtocol, old.Listen.ProxyProtocol) || !reflect.DeepEqual(next.TLS, old.TLS) ||
		next.Limits.StreamsPerConnection != old.Limits.StreamsPerConnection {
		log.Warn().Msg("listen, tls, ddr and limits.streams_per_connection changes take effect at the next restart")
	}
	log.Info().Str("config", next.Source).Int("scopes", len(next.Scopes)).
		Int("fallback_servers", len(next.FallbackServers)).Int("hosts", len(next.Hosts)).
		Str("log_level", next.Log.Level).Msg("reloaded")
	// Last, so that the event above is written whatever the new level.
	telemetry.SetLevel(next.Log.Level)
}

// drain stops every listener from accepting and waits, at most
// DrainTimeout, for the DoH requests in flight to be answered, then
// closes what is left. It does not rely on http.Server.Shutdown alone:
// an HTTP/2 connection a client keeps open can hold Shutdown until its
// deadline although no request is left.
func drain(o Options, listeners []*listener, reason string) {
	log := o.Log
	timeout := o.DrainTimeout
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	active := func() int64 { // DoH requests in flight
		var n int64
		for _, l := range listeners {
			if srv, ok := l.srv.(*doh.Server); ok {
				n += srv.Active()
			}
			if l.h3 != nil {
				n += l.h3.Active()
			}
		}
		return n
	}
	log.Info().Str("reason", reason).Int64("requests", active()).Int64("in_flight", o.Backend.InFlight()).
		Dur("timeout_ms", timeout).Msg("draining")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	shutdown := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, l := range listeners {
			wg.Go(func() { l.shutdown(ctx) })
		}
		wg.Wait()
		close(shutdown)
	}()
	complete := true
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	quiet := 0 // ticks in a row without a request in flight
wait:
	for {
		select {
		case <-shutdown:
			break wait
		case <-ctx.Done():
			complete = false
			log.Warn().Int64("requests", active()).Msg("drain cut short by its timeout")
			break wait
		case <-tick.C:
			if active()+inFlight(listeners) > 0 {
				quiet = 0
			} else if quiet++; quiet >= 5 {
				break wait
			}
		}
	}
	for _, l := range listeners {
		l.close()
	}
	log.Info().Dur("took_ms", time.Since(start)).Bool("complete", complete).Msg("stopped")
}

// gatherer returns m's registry, or nil (no /metrics) without metrics.
func gatherer(m *metrics.Metrics) prometheus.Gatherer {
	if m == nil {
		return nil
	}
	return m.Registry
}

// startCPUProfile writes a CPU profile of the server to path until stop;
// set by the hidden DOHFWD_SERVER_CPUPROFILE, for scripts/bench-doh.sh
// (the edge host has its own DOHFWD_CPUPROFILE).
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("DOHFWD_SERVER_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("DOHFWD_SERVER_CPUPROFILE: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
