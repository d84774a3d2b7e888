package engine

import (
	"reflect"
	"testing"
	"time"
)

// A hit record reads back as the entry and key it was written from:
// every field a reply, its Response and the mirror's rules read. Its
// stored time is the reader's clock less the entry's age at publication,
// whatever the writer's wall clock read: here the writer's is 1970 and
// the reader's now.
func TestHitRecordRoundTrip(t *testing.T) {
	en := &entry{result: ResultNXDomain, optClass: 1232,
		msg:     []byte{0, 0, 0x81, 0x83, 0, 1, 0, 0, 0, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
		optData: []byte{0, 15, 0, 2, 0, 3},
		stored:  time.Unix(1_000_000, 123_456_789), ttl: 90 * time.Second, scope: "corp",
		minPositive: 7, soaTTL: 90, soaMinimum: 60, hasSOA: true, hasFacts: true}
	en.ttlSpace[0], en.ttlSpace[1] = 12, 16
	en.ttls = en.ttlSpace[:2]
	key := cacheKey{name: "x.example.", qtype: 28, qclass: 1, do: true, cd: true}
	for _, prefetch := range []bool{false, true} {
		published := en.stored.Add(37*time.Second + 5) // the writer's clock: aged 37 s and 5 ns
		read := time.Now()                             // the reader's
		rec := appendHitRecord(nil, key, en, prefetch, published)
		gotKey, got, gotPrefetch, err := parseHitRecord(rec, read)
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if gotKey != key || gotPrefetch != prefetch {
			t.Fatalf("key %+v prefetch %v, want %+v %v", gotKey, gotPrefetch, key, prefetch)
		}
		if want := read.Add(-37*time.Second - 5); got.stored != want {
			t.Fatalf("stored %v, want %v (the reader's clock, monotonic reading and all, less the age)", got.stored, want)
		}
		got.msg = append([]byte(nil), got.msg...)
		want := en
		if !reflect.DeepEqual(got.msg, want.msg) || !reflect.DeepEqual(got.ttls, want.ttls) || !reflect.DeepEqual(got.optData, want.optData) ||
			got.result != want.result || got.optClass != want.optClass || got.ttl != want.ttl || got.scope != want.scope ||
			got.minPositive != want.minPositive || got.soaTTL != want.soaTTL || got.soaMinimum != want.soaMinimum ||
			got.hasSOA != want.hasSOA || got.hasFacts != want.hasFacts || got.staleOnly {
			t.Fatalf("entry read back:\n%+v\nwant\n%+v", got, en)
		}
		for cut := range rec {
			if _, _, _, err := parseHitRecord(rec[:cut], read); err == nil {
				t.Fatalf("a record cut to %d of %d bytes read", cut, len(rec))
			}
		}
		if _, _, _, err := parseHitRecord(appendHitRecord(nil, key, en, prefetch, en.stored.Add(-time.Second)), read); err == nil {
			t.Fatal("a record with a negative age read")
		}
	}
}
