package engine

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"

	"github.com/dohfwd/dohfwd/engine/dnswire"
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
func keyFor(client *clientQuery, name string) cacheKey {
	if !client.lower || name != client.name {
		name = strings.ToLower(name)
	}
	return cacheKey{name: name, qtype: client.qtype, qclass: client.qclass, cd: client.cd, do: client.do}
}

// With forward_ecs an answer to a query carrying an EDNS Client Subnet
// option (clientQuery.ecs) is for one subnet, which the key does not hold:
// it is neither cached nor shared.

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
			if en := e.Value; en.staleOnly {
				// Carried over a reload (keepStale): what is left of its
				// stale window.
				return en.stored.Add(en.ttl + conf.StaleMax).Sub(clock.time())
			}
			// Serve-stale keeps the entry past its TTL; live says when it
			// stops being fresh.
			return e.Value.ttl + conf.StaleMax
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

// get returns the entry for k and whether it is live at now. An expired
// entry still in its stale window (StaleMax) comes back not live; any
// other is nil.
//
// Otter's eviction policy is told of a read (GetEntry, GetIfPresent) for each of
// the first policyReads reads of an entry, then for one read in
// policySample, chosen at random before the look-up; the others read
// quietly. A told read goes to a read buffer that the reader drains every
// few reads (the frequency sketch, the LRU order, the timer wheel): that
// was a third of a hit's cost as WebAssembly, and a good part natively.
// The sketch counts to 15 at most, so an entry read 16 times is as
// popular as an entry can be, and its later reads keep it so at a
// fraction of the cost (otter's own read buffer drops reads under
// contention in the same way).
func (c *answerCache) get(k cacheKey, now time.Time) (*entry, bool) {
	en, _, live := c.getKeyed(k, now)
	return en, live
}

// getKeyed is get that also returns the name of the key the entry is
// stored under (equal to k.name, but the cache's own string), or "" when
// the read did not see it.
func (c *answerCache) getKeyed(k cacheKey, now time.Time) (en *entry, name string, live bool) {
	c.clock.observe(now)
	if rand.Uint32()%policySample == 0 {
		e, ok := c.entries.GetEntry(k)
		if !ok {
			return nil, "", false
		}
		e.Value.firstRead()
		en, live = c.state(e.Value, now)
		return en, e.Key.name, live
	}
	e, ok := c.entries.GetEntryQuietly(k)
	if !ok {
		return nil, "", false
	}
	if e.Value.firstRead() {
		c.entries.GetIfPresent(k)
	}
	en, live = c.state(e.Value, now)
	return en, e.Key.name, live
}

// policyReads and policySample: see answerCache.get.
const (
	policyReads  = 16
	policySample = 8
)

// firstRead counts a read of en and reports whether it is one of its
// first policyReads (answerCache.get). Once the count reaches
// policyReads it is only read, so a popular entry's hits do not contend
// on it.
func (en *entry) firstRead() bool {
	if en.reads.Load() < policyReads {
		en.reads.Add(1)
		return true
	}
	return false
}

// peek is get without moving the cache's clock or telling the policy: an
// explanation changes nothing.
func (c *answerCache) peek(k cacheKey, now time.Time) (*entry, bool) {
	e, ok := c.entries.GetEntryQuietly(k)
	if !ok {
		return nil, false
	}
	return c.state(e.Value, now)
}

// state is en (read from the cache) and whether it is live at now, as
// get returns it.
func (c *answerCache) state(en *entry, now time.Time) (*entry, bool) {
	switch {
	case en.live(now):
		return en, true
	case c.conf.StaleMax > 0 && now.Sub(en.stored) < en.ttl+c.conf.StaleMax:
		return en, false
	}
	return nil, false
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

// time is the latest time observed.
func (c *fedClock) time() time.Time { return c.start.Add(time.Duration(c.nanos.Load())) }

func (c *fedClock) NowNano() int64                    { return c.nanos.Load() }
func (*fedClock) Tick(time.Duration) <-chan time.Time { return nil }

// entry is an upstream answer (NOERROR or NXDOMAIN) in the form the cache
// keeps and every client's reply is written from: the packed message,
// never changed once made. A reply is a copy with the client's ID, RD
// bit and question case, the TTLs counted down in place, and an OPT
// record written for the client.
type entry struct {
	result    Result // ResultAnswer or ResultNXDomain
	staleOnly bool   // see below, with scope
	optClass  uint16 // the upstream's OPT UDP size; 0 when it sent none
	// asks counts the questions it answered, up to the prefetch
	// threshold; prefetched is set by the one question that starts its
	// prefetch (prefetch.go).
	asks     atomic.Int32
	msg      []byte   // ID 0, TC clear, no OPT record; TTLs clamped at age 0
	ttls     []uint16 // offsets of the TTL fields, in ttlSpace when they fit
	ttlSpace [16]uint16
	optData  []byte // the upstream's EDNS options less per-hop ones
	stored   time.Time
	ttl      time.Duration // how long it may be served; 0: not to be cached

	// scope is the name of the scope whose servers gave the answer: a
	// stale answer is served only to questions routed there. staleOnly
	// marks an entry carried over a reload that changed where questions
	// go: never live again, served only stale (keepStale).
	scope string

	// The TTL facts of msg as stored (ttlFacts less what its header
	// says), so a client's reply's TTL is known without walking it
	// (replyFacts); hasFacts is false for an entry made otherwise.
	minPositive, soaTTL, soaMinimum uint32
	hasSOA, hasFacts                bool
	prefetched                      atomic.Bool
	reads                           atomic.Uint32 // up to policyReads (firstRead)
	// publishedIn is the generation of the routes under which the
	// entry was published to a hit mirror (publishHit); 0: never.
	publishedIn atomic.Uint32
}

// entryFor returns a new entry whose msg is empty with room for n bytes.
// A reply of up to 456 bytes lives in the entry's own allocation: one
// allocation a forwarded question fewer. Each tier fills one of the
// allocator's size classes (the entry alone is 176 bytes, in the 176-byte
// class), so an entry takes at most a class step (16 to 64 bytes) more
// than the entry and the reply apart did, and often less.
func entryFor(n int) *entry {
	switch {
	case n <= 104:
		return entryWithRoom(func(b *[104]byte) []byte { return b[:0] }) // 288 bytes
	case n <= 136:
		return entryWithRoom(func(b *[136]byte) []byte { return b[:0] }) // 320
	case n <= 168:
		return entryWithRoom(func(b *[168]byte) []byte { return b[:0] }) // 352
	case n <= 200:
		return entryWithRoom(func(b *[200]byte) []byte { return b[:0] }) // 384
	case n <= 232:
		return entryWithRoom(func(b *[232]byte) []byte { return b[:0] }) // 416
	case n <= 264:
		return entryWithRoom(func(b *[264]byte) []byte { return b[:0] }) // 448
	case n <= 328:
		return entryWithRoom(func(b *[328]byte) []byte { return b[:0] }) // 512
	case n <= 392:
		return entryWithRoom(func(b *[392]byte) []byte { return b[:0] }) // 576
	case n <= 456:
		return entryWithRoom(func(b *[456]byte) []byte { return b[:0] }) // 640
	}
	return &entry{msg: make([]byte, 0, n)}
}

// copied is a new entry with en's contents, for an entry that must
// outlive the buffers en lies in (question.held). Field by field: the
// atomics are not copied as a struct (TestCopiedEntryIsEqual checks that
// every field is).
func (en *entry) copied() *entry {
	c := entryFor(len(en.msg) + dnswire.OPTFixedLen)
	c.msg = append(c.msg, en.msg...)
	c.ttlSpace = en.ttlSpace
	if en.ttls != nil {
		c.ttls = append(c.ttlSpace[:0], en.ttls...)
	}
	c.result, c.staleOnly, c.optClass, c.optData = en.result, en.staleOnly, en.optClass, en.optData
	c.stored, c.ttl, c.scope = en.stored, en.ttl, en.scope
	c.minPositive, c.soaTTL, c.soaMinimum = en.minPositive, en.soaTTL, en.soaMinimum
	c.hasSOA, c.hasFacts = en.hasSOA, en.hasFacts
	c.asks.Store(en.asks.Load())
	c.prefetched.Store(en.prefetched.Load())
	c.reads.Store(en.reads.Load())
	c.publishedIn.Store(en.publishedIn.Load())
	return c
}

// entryWithRoom allocates an entry and the array R after it together;
// room slices R.
func entryWithRoom[R any](room func(*R) []byte) *entry {
	x := new(struct {
		entry
		r R
	})
	x.msg = room(&x.r)
	return &x.entry
}

// makeEntry makes en, from replyEntry, the entry for its msg, a message
// that walked as *w (its TTLs are changed in place; *w may be changed
// too). conf gives the clamps.
func makeEntry(en *entry, w *walkedReply, result Result, conf *CacheConfig, now time.Time) *entry {
	reply := en.msg
	if w.optStart >= 0 && !w.optLast {
		// Cutting an OPT record out of the middle would move names that
		// later records point to: copy it with the OPT last, once.
		if r, rw, ok := optMovedLast(reply); ok {
			reply, *w = r, rw
		}
	}
	en.result, en.stored = result, now
	en.asks.Store(1) // the question that fetched it
	en.ttls = en.ttlSpace[:0]
	if w.optStart >= 0 && w.optLast {
		en.optClass = w.optClass
		en.optData = hopOptionsRemoved(w.optData)
		reply = reply[:w.optStart]
		binary.BigEndian.PutUint16(reply[dnswire.OffARCount:], binary.BigEndian.Uint16(reply[dnswire.OffARCount:])-1)
	}
	reply[dnswire.OffFlags] &^= 0x02 // TC
	binary.BigEndian.PutUint16(reply, 0)
	en.msg = reply

	positive := w.rcode == dnswire.RcodeSuccess && w.ancount > 0
	soaDone := false
	var life uint32
	sw, _ := walkReply(reply, func(section, off int, typ uint16) {
		en.ttls = append(en.ttls, uint16(off))
		ttl := binary.BigEndian.Uint32(reply[off:])
		switch {
		case positive:
			binary.BigEndian.PutUint32(reply[off:], clampSeconds(ttl, conf.MinTTL, conf.MaxTTL))
		case section == 1 && typ == dnswire.TypeSOA && !soaDone:
			// RFC 2308 §5: the SOA carries the negative TTL.
			soaDone = true
			life = clampSeconds(min(ttl, w.facts.soaMinimum), conf.MinTTL, conf.NegativeMaxTTL)
			binary.BigEndian.PutUint32(reply[off:], life)
		}
	})
	// The walk read each TTL after the clamp above wrote it: its facts
	// are the stored message's.
	en.minPositive, en.hasSOA, en.soaTTL, en.soaMinimum = sw.facts.minPositive, sw.facts.hasSOA, sw.facts.soaTTL, sw.facts.soaMinimum
	en.hasFacts = true
	if secs, ok := answerTTL(w.facts); ok {
		if positive {
			life = clampSeconds(secs, conf.MinTTL, conf.MaxTTL)
		}
		en.ttl = time.Duration(life) * time.Second
	}
	return en
}

// optMovedLast copies reply with its OPT record last.
func optMovedLast(reply []byte) ([]byte, walkedReply, bool) {
	p, ok := dnswire.NewParser(reply)
	if !ok {
		return nil, walkedReply{}, false
	}
	b := dnswire.NewBuilder(make([]byte, 0, len(reply)+dnswire.OPTFixedLen), p.Header())
	for {
		q, more := p.Question()
		if !more {
			break
		}
		name, err := dnswire.QuestionName(reply, q)
		if err != nil {
			return nil, walkedReply{}, false
		}
		b.Question(name, q.Type, q.Class)
	}
	var opt dnswire.RR
	for {
		rr, more := p.Next()
		if !more {
			break
		}
		if rr.Type == dnswire.TypeOPT {
			opt = rr
			continue
		}
		if err := b.CopyRR(rr.Section, reply, rr); err != nil {
			return nil, walkedReply{}, false
		}
	}
	if p.Err() != nil || opt.Type != dnswire.TypeOPT || b.CopyRR(dnswire.SectionAdditional, reply, opt) != nil {
		return nil, walkedReply{}, false
	}
	out, err := b.Finish()
	if err != nil {
		return nil, walkedReply{}, false
	}
	w, ok := walkReply(out, nil)
	return out, w, ok && w.optLast
}

// hopOptionsRemoved returns the EDNS options of data without those that
// belong to one hop (cookies, padding, keepalive, the client subnet); EDE
// and the rest are kept. The result does not alias data.
func hopOptionsRemoved(data []byte) []byte {
	var out []byte
	for o := 0; o+4 <= len(data); {
		code := binary.BigEndian.Uint16(data[o:])
		end := min(o+4+int(binary.BigEndian.Uint16(data[o+2:])), len(data))
		switch code {
		case dnswire.EDNS0COOKIE, dnswire.EDNS0PADDING, dnswire.EDNS0TCPKEEPALIVE, dnswire.EDNS0SUBNET:
		default:
			out = append(out, data[o:end]...)
		}
		o = end
	}
	return out
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
func (en *entry) live(now time.Time) bool { return !en.staleOnly && now.Sub(en.stored) < en.ttl }

// appendReply appends cq's reply, written from the entry as it reads at
// now: the client's ID and RD bit; qname, when not nil, written over the
// question name (the client's case, for a name that differs only in
// case); TTLs counted down by the whole seconds since the entry was
// stored; an OPT record when the client sent one (RFC 6891), with the
// client's DO bit, padded when the query was.
func (en *entry) appendReply(dst []byte, cq *clientQuery, qname []byte, now time.Time) []byte {
	return en.write(dst, cq, qname, now, -1)
}

// age is how many whole seconds the entry's TTLs are counted down by in
// a reply written at now.
func (en *entry) age(now time.Time) uint32 { return uint32(now.Sub(en.stored) / time.Second) }

// replyFacts are the rcode and answerTTL of the client's reply that write
// makes at now (or its stale form with staleTTL >= 0), from the facts
// makeEntry kept: what walking that reply would give. ok is false for an
// entry without them.
func (en *entry) replyFacts(now time.Time, staleTTL int64) (rcode int, ttl uint32, cacheable, ok bool) {
	if !en.hasFacts || len(en.msg) < dnswire.HeaderLen {
		return 0, 0, false, false
	}
	f := ttlFacts{
		rcode:       int(en.msg[3] & 0x0F), // the client's OPT carries no extended bits
		answers:     int(binary.BigEndian.Uint16(en.msg[dnswire.OffANCount:])),
		minPositive: en.minPositive, hasSOA: en.hasSOA, soaTTL: en.soaTTL, soaMinimum: en.soaMinimum,
	}
	if staleTTL >= 0 {
		f.minPositive, f.soaTTL = uint32(staleTTL), uint32(staleTTL)
	} else if age := en.age(now); age > 0 {
		f.minPositive, f.soaTTL = max(f.minPositive, age)-age, max(f.soaTTL, age)-age
	}
	ttl, cacheable = answerTTL(f)
	return f.rcode, ttl, cacheable, true
}

// write is appendReply; with staleTTL >= 0 it writes the stale form
// instead (appendStale).
func (en *entry) write(dst []byte, cq *clientQuery, qname []byte, now time.Time, staleTTL int64) []byte {
	start := len(dst)
	dst = append(dst, en.msg...)
	m := dst[start:]
	binary.BigEndian.PutUint16(m, cq.id)
	m[dnswire.OffFlags] &^= 0x01
	if cq.rd {
		m[dnswire.OffFlags] |= 0x01
	}
	if len(qname) > 0 && dnswire.HeaderLen+len(qname) <= len(m) {
		copy(m[dnswire.HeaderLen:], qname)
	}
	if staleTTL >= 0 {
		for _, off := range en.ttls {
			binary.BigEndian.PutUint32(m[off:], uint32(staleTTL))
		}
	} else if age := en.age(now); age > 0 {
		for _, off := range en.ttls {
			ttl := binary.BigEndian.Uint32(m[off:])
			binary.BigEndian.PutUint32(m[off:], max(ttl, age)-age)
		}
	}
	if !cq.opt {
		return dst
	}
	binary.BigEndian.PutUint16(m[dnswire.OffARCount:], binary.BigEndian.Uint16(m[dnswire.OffARCount:])+1)
	class := en.optClass
	if class == 0 {
		class = upstreamUDPSize
	}
	var ttl uint32
	if cq.do {
		ttl = 1 << 15
	}
	dst = append(dst, 0) // root
	dst = binary.BigEndian.AppendUint16(dst, dnswire.TypeOPT)
	dst = binary.BigEndian.AppendUint16(dst, class)
	dst = binary.BigEndian.AppendUint32(dst, ttl)
	optLen := len(en.optData)
	if staleTTL >= 0 {
		optLen += len(staleEDE)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(optLen))
	dst = append(dst, en.optData...)
	if staleTTL >= 0 {
		dst = append(dst, staleEDE...)
	}
	if cq.padded {
		dst = padOPT(dst, start)
	}
	return dst
}
