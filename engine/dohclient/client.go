package dohclient

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/dohfwd/dohfwd/engine"
)

// Config is a Client's settings. The zero value is usable: system roots,
// engine.DefaultEncryptedConnections connections per server,
// engine.DefaultEncryptedIdle idle time.
type Config struct {
	// TLS verifies the servers (roots from upstream_tls.ca_file, or the
	// system's; pins) and keeps the TLS sessions, shared with the DoT
	// connections; nil is engine.DefaultUpstreamTLS().
	TLS *engine.UpstreamTLS
	// MaxConns is the most connections kept open to one server.
	MaxConns int
	// IdleTimeout closes a connection that carried no stream that long.
	IdleTimeout time.Duration
	// Dial opens the TCP connection to addr from source (when valid),
	// giving up at ctx's deadline. nil is a net.Dialer; tests give an
	// in-memory one.
	Dial func(ctx context.Context, source netip.Addr, addr netip.AddrPort) (net.Conn, error)
}

// Client posts DNS queries to DoH servers. It implements
// engine.HTTPSExchanger and engine.ConnStatser. Safe for concurrent use.
type Client struct {
	cfg Config
	h2  *http2.Transport

	mu    sync.Mutex
	pools map[string]*pool // by the endpoint's canonical string
	done  bool
}

// New returns a Client with cfg's settings (zero fields take defaults).
func New(cfg Config) *Client {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = engine.DefaultEncryptedConnections
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = engine.DefaultEncryptedIdle
	}
	if cfg.TLS == nil {
		cfg.TLS = engine.DefaultUpstreamTLS()
	}
	if cfg.Dial == nil {
		cfg.Dial = dialTCP
	}
	return &Client{
		cfg: cfg,
		h2: &http2.Transport{
			IdleConnTimeout: cfg.IdleTimeout,
			// A question over the server's stream limit waits for a
			// stream on its connection (pool.go chooses the connection)
			// instead of failing.
			StrictMaxConcurrentStreams: true,
			// A DoH answer is at most 64 KiB; headers are a few.
			MaxHeaderListSize: 16 << 10,
			// Idle connections need no health check (the idle timer
			// closes them); a stream that times out pings (retry.go).
		},
		pools: make(map[string]*pool),
	}
}

// poolFor returns ep's pool, made on first use.
func (c *Client) poolFor(ep *engine.Endpoint) *pool {
	key := ep.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pools[key]
	if p == nil {
		p = newPool(c, ep)
		c.pools[key] = p
	}
	return p
}

// OpenConnections implements engine.ConnStatser: the connections open
// (or being opened) to ep now.
func (c *Client) OpenConnections(ep *engine.Endpoint) int {
	c.mu.Lock()
	p := c.pools[ep.String()]
	c.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.openCount()
}

// Stats is what the client counted for one endpoint since it started.
type Stats struct {
	Open       int    // connections open now
	Handshakes uint64 // TLS handshakes completed (full and resumed)
	Resumed    uint64 // of which resumed a session
	Failed     uint64 // connects or handshakes that failed
	Reused     uint64 // exchanges carried by a connection already open
	Retried    uint64 // exchanges posted again after a connection went away
}

// Stats returns ep's counters.
func (c *Client) Stats(ep *engine.Endpoint) Stats {
	c.mu.Lock()
	p := c.pools[ep.String()]
	c.mu.Unlock()
	if p == nil {
		return Stats{}
	}
	return p.stats()
}

// Close closes every connection; later exchanges fail.
func (c *Client) Close() error {
	c.mu.Lock()
	c.done = true
	pools := c.pools
	c.pools = map[string]*pool{}
	c.mu.Unlock()
	for _, p := range pools {
		p.closeAll()
	}
	return nil
}

// ExchangeHTTPS implements engine.HTTPSExchanger: it posts query to ep and
// reads the reply body into buf.
func (c *Client) ExchangeHTTPS(ctx context.Context, ep *engine.Endpoint, source netip.Addr, query, buf []byte, deadline time.Time) (int, engine.ConnInfo, error) {
	c.mu.Lock()
	closed := c.done
	c.mu.Unlock()
	if closed {
		return 0, engine.ConnInfo{}, &engine.SocketError{Op: "connect", Class: engine.ErrClosed, Err: errClientClosed}
	}
	return c.poolFor(ep).exchange(ctx, source, query, buf, deadline)
}

// dialTCP is the native connect.
func dialTCP(ctx context.Context, source netip.Addr, addr netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	if source.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(source, 0))
	}
	return d.DialContext(ctx, "tcp", addr.String())
}
