package limits

import (
	"net"
	"net/netip"
	"sync"
)

// OpenConn counts a connection that is no net.Conn (a QUIC connection,
// whose UDP address counts like a TCP peer's) against limits.connections
// and limits.client_connections. It reports false, having counted a
// refusal, when either is reached; otherwise release, called once the
// connection ends (more calls do nothing), gives the slot back.
func (l *Limiter) OpenConn(client net.Addr) (release func(), ok bool) {
	if !l.openConn() {
		return nil, false
	}
	var addr netip.Addr
	if u, isUDP := client.(*net.UDPAddr); isUDP {
		addr = u.AddrPort().Addr().Unmap()
	} else if ap, err := netip.ParseAddrPort(client.String()); err == nil {
		addr = ap.Addr().Unmap()
	}
	e, ok := l.acquireConn(addr)
	if !ok {
		l.closeConn()
		return nil, false
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if e != nil {
				l.releaseConn(e)
			}
			l.closeConn()
		})
	}, true
}
