package engine

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/miekg/dns"
)

// cacheKey names one cached answer. DO and CD change what an upstream
// answers (signatures, validation), so they are part of it.
type cacheKey struct {
	name   string // lowercased
	qtype  uint16
	qclass uint16
	do, cd bool
}

// keyFor is the key of client's question asked as name.
func keyFor(client *dns.Msg, name string) cacheKey {
	q := client.Question[0]
	k := cacheKey{name: strings.ToLower(name), qtype: q.Qtype, qclass: q.Qclass, cd: client.CheckingDisabled}
	if o := client.IsEdns0(); o != nil {
		k.do = o.Do()
	}
	return k
}

// sendsECS reports whether client carries an EDNS Client Subnet option. With
// forward_ecs such an answer is for one subnet, which the key does not
// hold: it is neither cached nor shared.
func sendsECS(client *dns.Msg) bool {
	o := client.IsEdns0()
	if o == nil {
		return false
	}
	for _, opt := range o.Option {
		if opt.Option() == dns.EDNS0SUBNET {
			return true
		}
	}
	return false
}

// answerCache holds upstream answers, positive and negative, each until its
// TTL runs out. Eviction beyond MaxEntries is otter's W-TinyLFU, which keeps
// popular names better than plain LRU under scans of one-off names.
type answerCache struct {
	conf    CacheConfig
	entries *otter.Cache[cacheKey, *entry]
	clock   *fedClock
}

// newAnswerCache returns a cache for conf, or nil when conf turns it off.
func newAnswerCache(conf CacheConfig) *answerCache {
	if conf.MaxEntries <= 0 {
		return nil
	}
	clock := &fedClock{start: time.Now()}
	c := otter.Must(&otter.Options[cacheKey, *entry]{
		MaximumSize: conf.MaxEntries,
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[cacheKey, *entry]) time.Duration {
			return e.Value.ttl
		}),
		// No ticks: expired entries are never returned, and are swept by
		// the maintenance that writes do. So the cache starts no goroutine
		// of its own (synctest bubbles, the WebAssembly build).
		Clock: clock,
		// Maintenance runs on the caller: no goroutine per write.
		Executor: func(fn func()) { fn() },
	})
	return &answerCache{conf: conf, entries: c, clock: clock}
}

// get returns the live entry for k, or nil.
func (c *answerCache) get(k cacheKey, now time.Time) *entry {
	c.clock.observe(now)
	en, ok := c.entries.GetIfPresent(k)
	if !ok || !en.live(now) {
		return nil
	}
	return en
}

// put stores en under k when it may be cached at all.
func (c *answerCache) put(k cacheKey, en *entry) {
	if en.ttl > 0 {
		c.clock.observe(en.stored)
		c.entries.Set(k, en)
	}
}

// fedClock is otter's clock: the latest time a question brought, so a cache
// read costs no clock read of its own (one costs ~300 ns on some virtual
// machines). It never runs backwards and never ticks.
type fedClock struct {
	start time.Time
	nanos atomic.Int64
}

func (c *fedClock) observe(now time.Time) {
	n := int64(now.Sub(c.start))
	for {
		old := c.nanos.Load()
		if n <= old || c.nanos.CompareAndSwap(old, n) {
			return
		}
	}
}

func (c *fedClock) NowNano() int64                    { return c.nanos.Load() }
func (*fedClock) Tick(time.Duration) <-chan time.Time { return nil }

// entry is an upstream answer (NOERROR or NXDOMAIN) in the form the cache
// keeps and every client's reply is built from. Its records never change
// once it is made: replies share them, and only the header, the question
// and the OPT record are each reply's own.
type entry struct {
	result Result // ResultAnswer or ResultNXDomain
	hdr    dns.MsgHdr
	opt    *dns.OPT // the upstream's OPT, less per-hop options; nil if none
	stored time.Time
	ttl    time.Duration // how long it may be served; 0: not to be cached
	base   *agedRecords  // the records at age 0, TTLs already clamped
	aged   atomic.Pointer[agedRecords]
}

// agedRecords are an entry's records with their TTLs counted down by age
// whole seconds. One set is made per second an entry is read in.
type agedRecords struct {
	age               uint32
	answer, ns, extra []dns.RR // extra without OPT
}

// newEntry makes the entry for reply, taking its records (it changes their
// TTLs). conf gives the clamps.
func newEntry(reply *dns.Msg, result Result, conf CacheConfig, now time.Time) *entry {
	en := &entry{result: result, hdr: reply.MsgHdr, stored: now}
	en.hdr.Truncated = false
	recs := &agedRecords{answer: reply.Answer, ns: reply.Ns}
	for _, rr := range reply.Extra {
		if opt, ok := rr.(*dns.OPT); ok {
			en.opt = hopOptionsRemoved(opt)
			continue
		}
		recs.extra = append(recs.extra, rr)
	}
	en.ttl = clampTTLs(recs, reply.Rcode, conf)
	en.base = recs
	en.aged.Store(recs)
	return en
}

// hopOptionsRemoved returns opt without the options that belong to one
// hop (cookies, padding, keepalive, the client subnet); EDE and the rest
// are kept.
func hopOptionsRemoved(opt *dns.OPT) *dns.OPT {
	out := &dns.OPT{Hdr: opt.Hdr}
	for _, o := range opt.Option {
		switch o.Option() {
		case dns.EDNS0COOKIE, dns.EDNS0PADDING, dns.EDNS0TCPKEEPALIVE, dns.EDNS0SUBNET:
			continue
		}
		out.Option = append(out.Option, o)
	}
	return out
}

// clampTTLs brings recs' TTLs within conf's bounds and returns how long the
// answer may be cached, 0 for never.
//
// A positive answer lives as long as its shortest record, each record
// clamped to [MinTTL, MaxTTL]. A negative one (NXDOMAIN, or NOERROR with no
// answer) lives min(SOA TTL, SOA MINIMUM) clamped to [MinTTL,
// NegativeMaxTTL] (RFC 2308 §5), and its SOA carries that TTL; without a
// SOA it is not cached (RFC 2308 §5).
func clampTTLs(recs *agedRecords, rcode int, conf CacheConfig) time.Duration {
	if rcode == dns.RcodeSuccess && len(recs.answer) > 0 {
		lowest := ^uint32(0)
		for _, section := range [...][]dns.RR{recs.answer, recs.ns} {
			for _, rr := range section {
				h := rr.Header()
				h.Ttl = clampSeconds(h.Ttl, conf.MinTTL, conf.MaxTTL)
				lowest = min(lowest, h.Ttl)
			}
		}
		// Additional records are clamped too but do not bound the
		// answer's life: they count down to 0 at the least.
		for _, rr := range recs.extra {
			h := rr.Header()
			h.Ttl = clampSeconds(h.Ttl, conf.MinTTL, conf.MaxTTL)
		}
		return time.Duration(lowest) * time.Second
	}
	for _, rr := range recs.ns {
		if soa, ok := rr.(*dns.SOA); ok {
			soa.Hdr.Ttl = clampSeconds(min(soa.Hdr.Ttl, soa.Minttl), conf.MinTTL, conf.NegativeMaxTTL)
			return time.Duration(soa.Hdr.Ttl) * time.Second
		}
	}
	return 0
}

// clampSeconds is ttl (seconds) within [lo, hi].
func clampSeconds(ttl uint32, lo, hi time.Duration) uint32 {
	l, h := uint32(lo/time.Second), uint32(hi/time.Second)
	if ttl < l {
		ttl = l
	}
	if h > 0 && ttl > h {
		ttl = h
	}
	return ttl
}

// live reports whether the entry may still be served at now.
func (en *entry) live(now time.Time) bool { return now.Sub(en.stored) < en.ttl }

// at returns the records as they read at now: TTLs counted down by the
// whole seconds since the entry was stored.
func (en *entry) at(now time.Time) *agedRecords {
	age := uint32(now.Sub(en.stored) / time.Second)
	recs := en.aged.Load()
	if recs.age == age {
		return recs
	}
	b := en.base
	recs = &agedRecords{age: age, answer: agedCopy(b.answer, age), ns: agedCopy(b.ns, age), extra: agedCopy(b.extra, age)}
	en.aged.Store(recs) // racing readers store equal sets
	return recs
}

func agedCopy(rrs []dns.RR, age uint32) []dns.RR {
	if len(rrs) == 0 {
		return nil
	}
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		c := dns.Copy(rr)
		h := c.Header()
		h.Ttl = max(h.Ttl, age) - age
		out[i] = c
	}
	return out
}

// replyBox is one client's reply in a single allocation: the message, its
// question, its additional section and its OPT record.
type replyBox struct {
	msg   dns.Msg
	q     [1]dns.Question
	extra [3]dns.RR
	opt   dns.OPT
}

// reply builds client's reply from the entry as it reads at now. The
// question is the client's, name case included; the ID is the client's.
// Answer, authority and additional records are shared with the entry and
// must not be changed; the slices are capped, so appending copies them.
func (en *entry) reply(client *dns.Msg, now time.Time) *dns.Msg {
	recs := en.at(now)
	b := new(replyBox)
	m := &b.msg
	m.MsgHdr = en.hdr
	m.Id = client.Id
	m.RecursionDesired = client.RecursionDesired
	b.q[0] = client.Question[0]
	m.Question = b.q[:]
	m.Answer = recs.answer[:len(recs.answer):len(recs.answer)]
	m.Ns = recs.ns[:len(recs.ns):len(recs.ns)]
	extra := b.extra[:0]
	if len(recs.extra) >= len(b.extra) {
		extra = make([]dns.RR, 0, len(recs.extra)+1)
	}
	extra = append(extra, recs.extra...)
	if co := client.IsEdns0(); co != nil {
		if en.opt != nil {
			b.opt = *en.opt
			b.opt.Option = b.opt.Option[:len(b.opt.Option):len(b.opt.Option)]
		} else {
			b.opt.Hdr = dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT, Class: upstreamUDPSize}
		}
		b.opt.SetDo(co.Do())
		extra = append(extra, &b.opt)
	}
	if len(extra) > 0 {
		m.Extra = extra[:len(extra):len(extra)]
	}
	return m
}
