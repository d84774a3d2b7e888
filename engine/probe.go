package engine

import (
	"context"
	"sync"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// Background probes (`probe: true`, off by default). Under the time-based marks a
// dead server loses its mark after the demotion period and the next client
// question pays its timeout. With probes on, each demoted server is asked
// a probe question shortly before its mark ends: a failure moves the mark
// forward, so no client question is sent to it first; a good reply clears
// the mark, so a recovered server is asked first again. Probes are
// transactions like any other (the ceiling applies) but spend no
// question's attempts and are not counted in upstream_failed.

// probeInterval is how often demoted servers are looked at.
const probeInterval = time.Second

// probeDue reports whether a server whose mark ends at until should be
// probed at now: it is demoted and its mark ends within lead.
func probeDue(until, now, lead time.Duration) bool {
	return demotedAt(until, now) && until-now <= lead
}

// probeQuery is ". IN NS" with RD and EDNS0, as other forwarders probe.
var probeQuery = func() []byte {
	q := &clientQuery{rd: true, opt: true, name: ".", qtype: dnswire.TypeNS, qclass: dnswire.ClassINET}
	wire, err := appendQuery(nil, q, ".", false)
	if err != nil {
		panic(err)
	}
	return wire
}()

// ProbeEvent describes one background probe.
type ProbeEvent struct {
	Server    string
	Transport Transport
	Outcome   Outcome
	RTT       time.Duration
	Cleared   bool // the probe removed the server's mark
}

// ProbeObserver is implemented by observers that also want probe events.
type ProbeObserver interface {
	Probe(ProbeEvent)
}

// prober is the running probe loop.
type prober struct {
	stop chan struct{}
	done chan struct{}
}

// setProbing starts or stops the probe loop. The caller holds e.mu.
func (e *Engine) setProbing(on bool) {
	switch {
	case on && e.prober == nil:
		p := &prober{stop: make(chan struct{}), done: make(chan struct{})}
		e.prober = p
		go e.probeLoop(p)
	case !on && e.prober != nil:
		close(e.prober.stop)
		<-e.prober.done
		e.prober = nil
	}
}

// Close stops the engine's background work (probes) and closes its idle
// pooled sockets and its DoT connections. Questions may still be asked; they are answered as
// usual, each on a fresh socket.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.setProbing(false)
	for _, u := range e.upstreams {
		u.pools.close()
		u.loopPools.close()
		u.closeEncrypted(false)
	}
	e.closeUpLoop()
	return nil
}

func (e *Engine) probeLoop(p *prober) {
	defer close(p.done)
	var running sync.WaitGroup
	defer running.Wait()
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		r := e.routes.Load()
		cfg := r.cfg
		lead := cfg.TransactionTimeout + probeInterval
		now := e.now()
		for _, s := range append(r.scopes[:len(r.scopes):len(r.scopes)], r.fallback) {
			for _, u := range s.servers {
				if !probeDue(u.markUntil(), now, lead) || !u.probing.CompareAndSwap(false, true) {
					continue
				}
				running.Go(func() {
					defer u.probing.Store(false)
					e.probe(s, u, cfg)
				})
			}
		}
	}
}

// probe asks u the probe question once.
func (e *Engine) probe(s *scope, u *upstream, cfg *Config) {
	if !e.inFlight.acquire() {
		return // at the ceiling: questions come first; try at the next tick
	}
	bufs := askBuffersPool.Get().(*askBuffers)
	defer askBuffersPool.Put(bufs)
	bufs.query = append(bufs.query[:0], probeQuery...)
	tx := transaction{server: u, transport: u.transportFor(e.first), source: s.source(u.addr), query: bufs.query, bufs: bufs,
		deadline: time.Now().Add(cfg.TransactionTimeout), cookies: s.cookies}
	sent := time.Now()
	var res exchangeResult
	e.exchange(context.Background(), &tx, &res)
	e.inFlight.release()
	rtt := time.Since(sent)
	ch := e.settle(u, res.outcome, probeAttempt, cfg.DemotionPeriod)
	ev := ProbeEvent{Server: u.key, Transport: tx.transport, Outcome: res.outcome, RTT: rtt, Cleared: ch.clearMark}
	if po, ok := e.observer.(ProbeObserver); ok {
		po.Probe(ev)
	}
}
