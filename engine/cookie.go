package engine

import (
	"crypto/rand"
	"encoding/binary"
	"net/netip"
	"sync"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// DNS Cookies toward upstreams (RFC 7873, with the interoperable server
// cookies of RFC 9018). Each server gets a client cookie of its own, 8
// random bytes drawn when the engine first lists its address (so once per
// server per process: RFC 7873 §6 asks for a cookie that differs per
// server and is not predictable, and a restart draws new ones). The
// server cookie a server returns is kept with the source address it was
// returned to (RFC 9018 binds it to the client's address) and sent back
// on the next query from that source. A reply whose COOKIE option does
// not carry the client cookie is not the server's: it is ignored as a
// mismatched reply. So is a reply without a COOKIE option from a server
// that has sent a server cookie before, unless its transaction then times
// out: the server is taken to have stopped speaking cookies, and the
// next transaction accepts its replies without one.

// Cookie sizes (RFC 7873 §4).
const (
	clientCookieLen    = 8
	minServerCookie    = 8
	maxServerCookie    = 32
	maxCookieOptionLen = 4 + clientCookieLen + maxServerCookie
)

// upstreamCookie is one server's cookies.
type upstreamCookie struct {
	client [clientCookieLen]byte // fixed for the upstream's life

	mu     sync.Mutex
	server [maxServerCookie]byte
	n      uint8      // the server cookie's length; 0: none learned
	source netip.Addr // the source the server cookie was returned to
}

// newUpstreamCookie draws a client cookie.
func newUpstreamCookie(c *upstreamCookie) {
	rand.Read(c.client[:])
}

// appendOption appends the COOKIE option for a query sent from source:
// the client cookie, and the server cookie learned at that source if any.
// It reports whether a server cookie went with it.
func (c *upstreamCookie) appendOption(dst []byte, source netip.Addr) ([]byte, bool) {
	c.mu.Lock()
	n := 0
	if c.n > 0 && c.source == source {
		n = int(c.n)
	}
	dst = binary.BigEndian.AppendUint16(dst, dnswire.EDNS0COOKIE)
	dst = binary.BigEndian.AppendUint16(dst, uint16(clientCookieLen+n))
	dst = append(dst, c.client[:]...)
	dst = append(dst, c.server[:n]...)
	c.mu.Unlock()
	return dst, n > 0
}

// learn keeps the server cookie a reply to source carried, when it differs
// from the one kept.
func (c *upstreamCookie) learn(server []byte, source netip.Addr) {
	c.mu.Lock()
	if int(c.n) != len(server) || c.source != source || string(c.server[:c.n]) != string(server) {
		c.n = uint8(copy(c.server[:], server))
		c.source = source
	}
	c.mu.Unlock()
}

// forget drops the server cookie: the server no longer sends one.
func (c *upstreamCookie) forget() {
	c.mu.Lock()
	c.n = 0
	c.mu.Unlock()
}

// known reports whether a server cookie is kept, for operators.
func (c *upstreamCookie) known() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > 0
}

// cookieCheck is what a reply's COOKIE option says about it.
type cookieCheck uint8

const (
	cookieOK      cookieCheck = iota // the client cookie is ours (or cookies were not sent)
	cookieWrong                      // a client cookie that is not ours, or a malformed option
	cookieMissing                    // none, from a server that sent one before
)

// checkCookie checks the options data of a reply to tx and learns the
// server cookie it carries.
func (tx *transaction) checkCookie(optData []byte) cookieCheck {
	tx.gotServerCookie = false
	if !tx.cookies {
		return cookieOK
	}
	for off := 0; ; {
		code, value, next, ok := dnswire.NextOption(optData, off)
		if !ok {
			if tx.sentServerCookie {
				return cookieMissing
			}
			return cookieOK
		}
		if code == dnswire.EDNS0COOKIE {
			c := &tx.server.cookie
			if len(value) < clientCookieLen || string(value[:clientCookieLen]) != string(c.client[:]) {
				return cookieWrong
			}
			server := value[clientCookieLen:]
			if len(server) == 0 {
				return cookieOK
			}
			if len(server) < minServerCookie || len(server) > maxServerCookie {
				return cookieWrong
			}
			c.learn(server, tx.source)
			tx.gotServerCookie = true
			return cookieOK
		}
		off = next
	}
}
