package dohclient

import (
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/dohfwd/dohfwd/engine"
)

// dialShare is how many exchanges may wait on one connection being
// opened before another is opened beside it (within MaxConns): HTTP/2's
// usual stream limit, so a burst against a cold server opens one
// connection, not one per question.
const dialShare = 100

// pool is one endpoint's connections.
type pool struct {
	c      *Client
	ep     engine.Endpoint
	url    *url.URL
	host   string // the :authority: NAME, with the port when not 443
	header http.Header

	mu    sync.Mutex
	conns []*pconn

	handshakes, resumed, failed, reused, retried atomic.Uint64
}

// pconn is one connection of a pool: being opened (cc nil, opened not
// closed yet), or open.
type pconn struct {
	source  netip.Addr
	opened  chan struct{} // closed when the dial ended; then cc or err is set
	cc      *http2.ClientConn
	err     error
	resumed bool
	waiting int         // exchanges that chose it while it was being opened
	pinging atomic.Bool // a health PING is out (retry.go)
}

func newPool(c *Client, ep *engine.Endpoint) *pool {
	p := &pool{c: c, ep: *ep}
	p.host = ep.Name
	if ep.Addr.Port() != engine.DefaultDoHPort {
		p.host = hostPort(ep.Name, ep.Addr.Port())
	}
	p.url = &url.URL{Scheme: "https", Host: p.host, Path: ep.Path}
	p.header = http.Header{
		"Content-Type": {mediaType},
		"Accept":       {mediaType},
	}
	return p
}

// hostPort is name:port, an IPv6 name in brackets.
func hostPort(name string, port uint16) string {
	if a, err := netip.ParseAddr(name); err == nil && a.Is6() {
		return "[" + name + "]:" + strconv.Itoa(int(port))
	}
	return name + ":" + strconv.Itoa(int(port))
}

// take returns the connection an exchange from source posts on: the least
// loaded open one with a free stream (reserved for it; ready: open when
// taken, else the caller waits for pc.opened before it reads pc.cc);
// else one being opened that has room; else a new one (opener true: the
// caller's attempt opens it), within MaxConns for that source; else the
// least loaded open one, whose streams it waits for. Connections found
// closed are dropped. A connection draining after a GOAWAY takes no new
// streams and does not count against MaxConns.
func (p *pool) take(source netip.Addr) (pc *pconn, opener, ready bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := 0
	var best, least, dialing *pconn
	bestLoad, leastLoad := 0, 0
	kept := p.conns[:0]
	for _, c := range p.conns {
		if c.cc == nil {
			select {
			case <-c.opened:
				continue // failed: its dialer reported it
			default:
			}
			kept = append(kept, c)
			if c.source == source {
				live++
				if dialing == nil || c.waiting < dialing.waiting {
					dialing = c
				}
			}
			continue
		}
		st := c.cc.State()
		if st.Closed {
			continue
		}
		kept = append(kept, c)
		if st.Closing || c.source != source {
			continue
		}
		live++
		load := st.StreamsActive + st.StreamsReserved + st.StreamsPending
		max := int(st.MaxConcurrentStreams)
		if max == 0 {
			max = dialShare
		}
		if load < max && (best == nil || load < bestLoad) {
			best, bestLoad = c, load
		}
		if least == nil || load < leastLoad {
			least, leastLoad = c, load
		}
	}
	clear(p.conns[len(kept):])
	p.conns = kept
	switch {
	case best != nil && best.cc.ReserveNewRequest():
		return best, false, true
	case dialing != nil && dialing.waiting < dialShare:
		dialing.waiting++
		return dialing, false, false
	case live < p.c.cfg.MaxConns:
		pc := &pconn{source: source, opened: make(chan struct{})}
		p.conns = append(p.conns, pc)
		return pc, true, false
	case least != nil:
		return least, false, true
	default:
		dialing.waiting++
		return dialing, false, false
	}
}

// open dials pc, bounded by deadline, and publishes the result.
func (p *pool) open(pc *pconn, deadline time.Time) {
	cc, resumed, err := p.dial(pc.source, deadline)
	p.mu.Lock()
	pc.cc, pc.resumed, pc.err = cc, resumed, err
	close(pc.opened)
	p.mu.Unlock()
	if err != nil {
		p.failed.Add(1)
		return
	}
	p.handshakes.Add(1)
	if resumed {
		p.resumed.Add(1)
	}
}

// openCount is the connections open or being opened (a draining one
// included, until it closes).
func (p *pool) openCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		if c.cc == nil {
			select {
			case <-c.opened:
				continue
			default:
				n++
				continue
			}
		}
		if !c.cc.State().Closed {
			n++
		}
	}
	return n
}

func (p *pool) stats() Stats {
	return Stats{
		Open:       p.openCount(),
		Handshakes: p.handshakes.Load(),
		Resumed:    p.resumed.Load(),
		Failed:     p.failed.Load(),
		Reused:     p.reused.Load(),
		Retried:    p.retried.Load(),
	}
}

// closeAll closes every connection, interrupting their streams.
func (p *pool) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		if c.cc != nil {
			c.cc.Close()
		}
	}
}
