package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// Publishing hot cache entries. At the edge the engine runs as
// WebAssembly, where a cache hit costs ten times its native cost; its
// host answers the hits that read nothing but the engine's state from a
// native mirror of those entries (HotEntries), built from this package, so
// the rules are not written twice. An entry is published when a hit on it
// becomes a pure read of the engine's state: it is live, its reads
// reached policyReads (firstRead: the cache's policy then only samples
// it) and its asks reached PrefetchMinHits (prefetchDue: the count is then
// only read). From then until its TTL, or with prefetch on until the last
// tenth of its TTL (where prefetchDue starts a prefetch, which the engine
// must see), a hit changes nothing in the engine but otter's sampled read
// order. Natively nothing is published: the hook is nil and costs a
// pointer test per hit.

// PublishHotEntries makes e hand each cache entry whose hits became pure
// reads to publish, encoded as a hit record (AppendHitRecord's layout),
// for a HotEntries outside e to answer those hits. Use it only where e
// runs as WebAssembly (the edge module): its host answers the hot hits
// natively. It publishes once per entry and configuration (a reload
// that keeps the cache publishes its entries again at their next hit,
// for a HotEntries emptied by that reload). record is valid during the call only. publish runs on the
// question's goroutine and must not call e. Set it before the first
// question; nil (the default) publishes nothing.
func (e *Engine) PublishHotEntries(publish func(record []byte)) { e.publish = publish }

// publishHit publishes en, the live entry the hit at now on key read,
// when its hits became pure reads and it was not published under this
// configuration yet.
func (qn *question) publishHit(key cacheKey, en *entry, now time.Time) {
	rt := qn.routes
	minHits := rt.cfg.Cache.PrefetchMinHits
	if rt != qn.e.routes.Load() {
		return // a question read before a reload: its entry may be of the old routes
	}
	if en.publishedIn.Load() == rt.generation || en.reads.Load() < policyReads || en.staleOnly ||
		int(en.asks.Load()) < minHits {
		return
	}
	prefetch := minHits > 0
	if prefetch && (en.prefetched.Load() || inPrefetchWindow(en, now)) {
		return // the engine sees its hits from here on
	}
	old := en.publishedIn.Load()
	if old == rt.generation || !en.publishedIn.CompareAndSwap(old, rt.generation) {
		return // another hit publishes it
	}
	rec := appendHitRecord(make([]byte, 0, hitRecordHeaderSize+len(key.name)+len(en.scope)+len(en.msg)+len(en.optData)+2*len(en.ttls)), key, en, prefetch, now)
	qn.e.publish(rec)
}

// inPrefetchWindow reports whether now lies in the last tenth of en's TTL,
// where prefetchDue starts its prefetch.
func inPrefetchWindow(en *entry, now time.Time) bool { return 10*now.Sub(en.stored) >= 9*en.ttl }

// A hit record is one published entry, little-endian:
//
//	0  version (hitRecordVersion)
//	1  flags: 1 DO, 2 CD (the key's), 4 hasSOA, 8 hasFacts, 16 prefetch
//	   (the engine prefetches: the mirror stops at the last tenth of the TTL)
//	2  result (ResultAnswer or ResultNXDomain)
//	3  0
//	4  qtype, qclass, optClass (uint16 each), the count of TTL offsets (uint16)
//	12 minPositive, soaTTL, soaMinimum (uint32 each)
//	24 age (int64 nanoseconds: how long before publication the entry was
//	   stored, by the engine's monotonic clock), ttl (int64 nanoseconds)
//	40 the lengths of name, scope, msg and optData (uint16 each)
//	48 the TTL offsets (uint16 each), then name (lower case, fully
//	   qualified: the key's), scope, msg, optData
const hitRecordHeaderSize = 48

const hitRecordVersion = 2 // 2: an age, not a wall-clock stored time

// Flags of a hit record.
const (
	hitDO = 1 << iota
	hitCD
	hitSOA
	hitFacts
	hitPrefetch
)

// appendHitRecord appends the record of en, cached under key and
// published at now, to b. The record carries en's age at now, not its
// stored time: the two clocks' wall readings need not agree, and the
// engine ages en by its monotonic clock (see parseHitRecord).
func appendHitRecord(b []byte, key cacheKey, en *entry, prefetch bool, now time.Time) []byte {
	var flags byte
	for _, f := range [...]struct {
		on  bool
		bit byte
	}{{key.do, hitDO}, {key.cd, hitCD}, {en.hasSOA, hitSOA}, {en.hasFacts, hitFacts}, {prefetch, hitPrefetch}} {
		if f.on {
			flags |= f.bit
		}
	}
	le := binary.LittleEndian
	b = append(b, hitRecordVersion, flags, byte(en.result), 0)
	b = le.AppendUint16(b, key.qtype)
	b = le.AppendUint16(b, key.qclass)
	b = le.AppendUint16(b, en.optClass)
	b = le.AppendUint16(b, uint16(len(en.ttls)))
	b = le.AppendUint32(b, en.minPositive)
	b = le.AppendUint32(b, en.soaTTL)
	b = le.AppendUint32(b, en.soaMinimum)
	b = le.AppendUint64(b, uint64(now.Sub(en.stored)))
	b = le.AppendUint64(b, uint64(en.ttl))
	for _, n := range [...]int{len(key.name), len(en.scope), len(en.msg), len(en.optData)} {
		b = le.AppendUint16(b, uint16(n))
	}
	for _, off := range en.ttls {
		b = le.AppendUint16(b, off)
	}
	b = append(b, key.name...)
	b = append(b, en.scope...)
	b = append(b, en.msg...)
	return append(b, en.optData...)
}

var errHitRecordShort = errors.New("hit record: short")

// parseHitRecord reads a record appendHitRecord wrote into a new entry
// (nothing aliases rec), its key and its prefetch flag. The entry is
// stored at now less the record's age: now is the reader's clock (with
// its monotonic reading), so the entry ages by that clock from here on,
// and a step of either side's wall clock changes nothing. What is left
// is the record's delivery delay (publication to now, a poll: µs to ms),
// by which the reader's entry is younger than the engine's: it is
// served, and its TTLs written, as if that much later, so it may live
// that much past the engine's expiry and write a TTL one second higher
// when the delay crosses a whole second of its age.
func parseHitRecord(rec []byte, now time.Time) (key cacheKey, en *entry, prefetch bool, err error) {
	if len(rec) < hitRecordHeaderSize {
		return key, nil, false, errHitRecordShort
	}
	if rec[0] != hitRecordVersion {
		return key, nil, false, fmt.Errorf("hit record: version %d", rec[0])
	}
	le := binary.LittleEndian
	flags := rec[1]
	nTTLs := int(le.Uint16(rec[10:]))
	var lens [4]int
	for i := range lens {
		lens[i] = int(le.Uint16(rec[40+2*i:]))
	}
	want := hitRecordHeaderSize + 2*nTTLs + lens[0] + lens[1] + lens[2] + lens[3]
	if len(rec) != want {
		return key, nil, false, fmt.Errorf("hit record: %d bytes, its lengths say %d", len(rec), want)
	}
	key = cacheKey{qtype: le.Uint16(rec[4:]), qclass: le.Uint16(rec[6:]), do: flags&hitDO != 0, cd: flags&hitCD != 0}
	en = entryFor(lens[2] + dnswire.OPTFixedLen) // as attempt.go: room for the client's OPT
	en.result = Result(rec[2])
	en.optClass = le.Uint16(rec[8:])
	en.minPositive, en.soaTTL, en.soaMinimum = le.Uint32(rec[12:]), le.Uint32(rec[16:]), le.Uint32(rec[20:])
	en.hasSOA, en.hasFacts = flags&hitSOA != 0, flags&hitFacts != 0
	age := time.Duration(le.Uint64(rec[24:]))
	if age < 0 {
		return key, nil, false, fmt.Errorf("hit record: negative age %v", age)
	}
	en.stored = now.Add(-age)
	en.ttl = time.Duration(le.Uint64(rec[32:]))
	p := rec[hitRecordHeaderSize:]
	en.ttls = en.ttlSpace[:0]
	for i := range nTTLs {
		off := le.Uint16(p[2*i:])
		if int(off)+4 > lens[2] {
			return key, nil, false, fmt.Errorf("hit record: TTL offset %d past the message's %d bytes", off, lens[2])
		}
		en.ttls = append(en.ttls, off)
	}
	p = p[2*nTTLs:]
	key.name, p = string(p[:lens[0]]), p[lens[0]:]
	en.scope, p = string(p[:lens[1]]), p[lens[1]:]
	en.msg, p = append(en.msg, p[:lens[2]]...), p[lens[2]:]
	if lens[3] > 0 {
		en.optData = append([]byte(nil), p[:lens[3]]...)
	}
	if len(en.msg) < dnswire.HeaderLen {
		return key, nil, false, errHitRecordShort
	}
	return key, en, flags&hitPrefetch != 0, nil
}
