package limits

import (
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var (
	clientA  = netip.MustParseAddr("192.0.2.10")
	clientA2 = netip.MustParseAddr("192.0.2.200") // same /24 as clientA
	clientB  = netip.MustParseAddr("198.51.100.1")
	client6  = netip.MustParseAddr("2001:db8:0:ff::1")
	client62 = netip.MustParseAddr("2001:db8:0:1::2") // same /56 as client6
)

// A prefix gets its burst at once, then one query per 1/qps; another
// prefix has its own bucket. Time is synctest's, so the rule is exact.
func TestTokenBucketRateAndBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{ClientQPS: 2, ClientBurst: 5}, Options{})
		for i := range 5 {
			if ok, _ := l.Admit(clientA); !ok {
				t.Fatalf("query %d of the burst refused", i+1)
			}
		}
		ok, wait := l.Admit(clientA2) // same /24: same bucket
		if ok || wait != 500*time.Millisecond {
			t.Fatalf("6th query: ok=%v retry after %v, want refused, 500ms", ok, wait)
		}
		if ok, _ := l.Admit(clientB); !ok {
			t.Fatal("another prefix was refused")
		}
		time.Sleep(499 * time.Millisecond)
		if ok, _ := l.Admit(clientA); ok {
			t.Fatal("admitted before a token came back")
		}
		time.Sleep(time.Millisecond)
		if ok, _ := l.Admit(clientA); !ok {
			t.Fatal("refused once a token came back")
		}
		time.Sleep(time.Hour) // refills to the burst, not past it
		n := 0
		for {
			if ok, _ := l.Admit(clientA); !ok {
				break
			}
			n++
		}
		if n != 5 {
			t.Fatalf("after an hour idle %d queries admitted at once, want the burst, 5", n)
		}
		if got := l.Refused()[LimitRate]; got != 3 {
			t.Fatalf("client_qps refusals %d, want 3", got)
		}
	})
}

func TestBurstDefaultsToRate(t *testing.T) {
	l := New(Config{ClientQPS: 0.5}, Options{})
	if ok, _ := l.Admit(clientA); !ok {
		t.Fatal("first query refused")
	}
	if ok, wait := l.Admit(clientA); ok || wait <= time.Second {
		t.Fatalf("second query: ok=%v wait %v, want refused for ~2s", ok, wait)
	}
}

func TestIPv6GroupsBySlash56(t *testing.T) {
	l := New(Config{ClientQPS: 1, ClientBurst: 1}, Options{})
	l.Admit(client6)
	if ok, _ := l.Admit(client62); ok {
		t.Fatal("same /56 got a second bucket")
	}
	l.Reconfigure(Config{ClientQPS: 1, ClientBurst: 1, PrefixV6: 64})
	if ok, _ := l.Admit(client62); !ok {
		t.Fatal("with /64 prefixes, another /64 was refused")
	}
}

func TestLimitsOffAdmitEverything(t *testing.T) {
	l := New(Config{}, Options{})
	for range 10000 {
		if ok, _ := l.Admit(clientA); !ok {
			t.Fatal("refused with every limit off")
		}
		if s, ok := l.AcquireTransaction(clientA); !ok || s != nil {
			t.Fatal("a transaction was counted with the limit off")
		}
	}
	if l.Prefixes() != 0 {
		t.Fatalf("%d prefixes kept with every limit off", l.Prefixes())
	}
}

// client_in_flight counts transactions per prefix, gives them back on
// release, and refuses both the transaction and new queries at the limit.
func TestInFlightPerPrefix(t *testing.T) {
	l := New(Config{ClientInFlight: 2}, Options{})
	a, ok1 := l.AcquireTransaction(clientA)
	b, ok2 := l.AcquireTransaction(clientA2)
	if !ok1 || !ok2 {
		t.Fatal("refused under the limit")
	}
	if _, ok := l.AcquireTransaction(clientA); ok {
		t.Fatal("third transaction of the prefix taken")
	}
	if ok, _ := l.Admit(clientA); ok {
		t.Fatal("query admitted while the prefix is at its limit")
	}
	if _, ok := l.AcquireTransaction(clientB); !ok {
		t.Fatal("another prefix refused")
	}
	a.ReleaseTransaction()
	if ok, _ := l.Admit(clientA); !ok {
		t.Fatal("query refused after a release")
	}
	if _, ok := l.AcquireTransaction(clientA); !ok {
		t.Fatal("transaction refused after a release")
	}
	b.ReleaseTransaction()
	if got := l.Refused()[LimitInFlight]; got != 2 {
		t.Fatalf("client_in_flight refusals %d, want 2", got)
	}
}

// A flood of distinct prefixes keeps the table at its bound; entries
// holding a transaction are never evicted, and a prefix that spent its
// burst keeps that state while the flood's full buckets go first.
func TestTableBoundedUnderFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const max = 256
		l := New(Config{ClientQPS: 1, ClientBurst: 3, ClientInFlight: 10}, Options{MaxPrefixes: max})
		held, _ := l.AcquireTransaction(clientB)
		for i := range 100000 {
			a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), 1})
			l.Admit(a)
			if i%1000 == 0 {
				time.Sleep(2 * time.Second) // the flood's buckets refill: evictable
			}
			if n := l.Prefixes(); n > max+1 {
				t.Fatalf("table holds %d entries, bound %d", n, max)
			}
		}
		l.mu.Lock()
		_, kept := l.table.m[l.Prefix(clientB)]
		l.mu.Unlock()
		if !kept {
			t.Fatal("an entry holding a transaction was evicted")
		}
		held.ReleaseTransaction()
	})
}

// Eviction prefers full idle buckets: among a full table of spent
// buckets and one full one, the full one goes.
func TestEvictionPrefersFullBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{ClientQPS: 0.001, ClientBurst: 1}, Options{MaxPrefixes: 4})
		spent := []netip.Addr{clientA, clientB, client6}
		for _, a := range spent {
			l.Admit(a) // bucket empty for 1000 s
		}
		full := netip.MustParseAddr("203.0.113.1")
		l.mu.Lock()
		l.table.get(l.Prefix(full), time.Now(), l.cfg.Load()) // full bucket, never used
		l.mu.Unlock()
		l.Admit(netip.MustParseAddr("203.0.114.1")) // a fifth prefix: one must go
		for _, a := range spent {
			if ok, _ := l.Admit(a); ok {
				t.Fatalf("%v got a fresh bucket: a spent bucket was evicted before the full one", a)
			}
		}
	})
}

func TestSummaryAtMostOncePerPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu   sync.Mutex
			sums []Summary
		)
		l := New(Config{ClientQPS: 1, ClientBurst: 1}, Options{SummaryEvery: 10 * time.Second,
			OnSummary: func(s Summary) { mu.Lock(); sums = append(sums, s); mu.Unlock() }})
		for range 1000 {
			l.Admit(clientA) // 1 admitted, 999 refused, no summary yet
		}
		time.Sleep(10 * time.Second) // refills 1 token... and 9 more, capped at 1
		for range 5 {
			l.Admit(clientA)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(sums) != 1 {
			t.Fatalf("%d summaries, want 1", len(sums))
		}
		// The first refusal after the period reports itself and the 999
		// before it; the 3 after wait for the next period.
		if got := sums[0].Refused[LimitRate]; got != 999+1 {
			t.Fatalf("summary counts %d refusals, want 1000", got)
		}
		if sums[0].Last != netip.MustParsePrefix("192.0.2.0/24") {
			t.Fatalf("summary names %v", sums[0].Last)
		}
	})
}
