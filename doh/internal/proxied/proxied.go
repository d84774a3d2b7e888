// Package proxied wraps a listener so that connections from trusted layer-4
// load balancers carry the client address of their PROXY protocol header
// (v1 or v2). Behind such a balancer every TCP peer is the balancer; the
// header says who the client was, and conn.RemoteAddr then reports that
// client, so everything above the listener (the DoH handler's peer and
// client address, logs, limits, metrics) sees the real client without
// knowing the protocol exists.
//
// The rule is strict both ways, as the protocol asks (a receiver must not
// guess whether a header is there): a peer inside the trusted prefixes must
// open with a header, and a peer outside them must not send one. A
// connection that breaks the rule, or whose header is malformed, fails its
// first read and is closed by the server; other connections are untouched.
package proxied

import (
	"net"
	"net/netip"
	"strings"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
)

// DefaultHeaderTimeout bounds the wait for a trusted peer's header. Balancers
// send it at once, before any client byte.
const DefaultHeaderTimeout = 5 * time.Second

// Options configure Listen.
type Options struct {
	// Trusted are the balancers' addresses. Empty means no PROXY protocol:
	// Listen returns the listener unchanged.
	Trusted []netip.Prefix
	// HeaderTimeout bounds the wait for a header; 0 = DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// OnRefuse, when set, is told about each connection refused for its
	// header (missing, unwanted or malformed). It runs on the connection's
	// first read, in the goroutine serving it.
	OnRefuse func(peer netip.AddrPort, err error)
}

// Listen wraps ln with PROXY protocol handling for o.Trusted peers. It is
// the one wrapper every DoH listener (HTTPS, plaintext, DoT) goes through.
func Listen(ln net.Listener, o Options) net.Listener {
	if len(o.Trusted) == 0 {
		return ln
	}
	timeout := o.HeaderTimeout
	if timeout <= 0 {
		timeout = DefaultHeaderTimeout
	}
	trusted := o.Trusted
	pl := &proxyproto.Listener{
		Listener:          ln,
		ReadHeaderTimeout: timeout,
		ConnPolicy: func(c proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			if Trusts(trusted, peerOf(c.Upstream).Addr()) {
				return proxyproto.REQUIRE, nil
			}
			return proxyproto.REJECT, nil
		},
	}
	if o.OnRefuse == nil {
		return pl
	}
	return &reportingListener{Listener: pl, onRefuse: o.OnRefuse}
}

// Trusts reports whether addr lies in one of the trusted prefixes.
func Trusts(trusted []netip.Prefix, addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// IsRefusal reports whether err is a read error of a connection refused
// for its PROXY header: missing from a trusted peer, sent by an untrusted
// one, or malformed. The library's errors all carry its "proxyproto:"
// prefix, some wrapped, so the text is the one stable mark.
func IsRefusal(err error) bool {
	return err != nil && strings.Contains(err.Error(), "proxyproto:")
}

func peerOf(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// reportingListener tells OnRefuse about refused connections.
type reportingListener struct {
	net.Listener
	onRefuse func(netip.AddrPort, error)
}

func (l *reportingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pc, ok := c.(*proxyproto.Conn)
	if !ok {
		return c, nil
	}
	return &reportingConn{Conn: pc, onRefuse: l.onRefuse}, nil
}

// reportingConn reports the first read that fails for the header. It keeps
// *proxyproto.Conn's methods (RemoteAddr above all) by embedding it.
type reportingConn struct {
	*proxyproto.Conn
	onRefuse func(netip.AddrPort, error)
	reported bool // only the serving goroutine reads
}

func (c *reportingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && !c.reported && IsRefusal(err) {
		c.reported = true
		c.onRefuse(peerOf(c.Conn.Raw().RemoteAddr()), err)
	}
	return n, err
}
