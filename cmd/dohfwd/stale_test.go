package main

import (
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// Serve-stale through the DoH front end, with the default cache settings
// (stale_max 24h, stale_ttl 30s, stale_answer_after 1.8s): a name answered
// with TTL 1, then its only server dropping every query. The next DoH
// question gets the expired answer at the client timer with EDE 3 and
// Cache-Control max-age=30; the JSON form gets the same TTL and header.
func TestStaleAnswerThroughDoH(t *testing.T) {
	t.Parallel()
	var dropping atomic.Bool
	answer := upstreamtest.Answer("@ 1 IN A 192.0.2.9")
	srv := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if dropping.Load() {
			return upstreamtest.Action{}
		}
		return answer(q)
	})
	d := startDohfwd(t, scopeYAML(srv.String()), newPKI(t))
	c := d.client()
	ednsQuery := func() *dns.Msg {
		q := newQuery("stale.e2e.test", dns.TypeA)
		q.SetEdns0(1232, false)
		return q
	}
	if res, m := d.query(c, ednsQuery()); m == nil || m.Rcode != dns.RcodeSuccess || res.Header.Get("Cache-Control") != "max-age=1" {
		t.Fatalf("first: %v %q", m, res.Header.Get("Cache-Control"))
	}
	time.Sleep(1100 * time.Millisecond)
	dropping.Store(true)

	start := time.Now()
	res, m := d.query(c, ednsQuery())
	took := time.Since(start)
	if m == nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.9" {
		t.Fatalf("stale: %v", m)
	}
	if ttl := m.Answer[0].Header().Ttl; ttl != 30 {
		t.Errorf("stale record TTL %d, want 30", ttl)
	}
	if cc := res.Header.Get("Cache-Control"); cc != "max-age=30" {
		t.Errorf("Cache-Control %q, want max-age=30", cc)
	}
	var codes []uint16
	if o := m.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_EDE); ok {
				codes = append(codes, e.InfoCode)
			}
		}
	}
	if len(codes) != 1 || codes[0] != dns.ExtendedErrorCodeStaleAnswer {
		t.Errorf("EDE codes %v, want [3]", codes)
	}
	// The client timer answered, not the end of the attempts (6 s).
	if took < 1800*time.Millisecond || took > 5*time.Second {
		t.Errorf("stale answer after %v, want at the 1.8 s timer", took)
	}
	ev := d.waitEvent(5*time.Second, func(ev map[string]any) bool {
		return ev["message"] == "question" && ev["qname"] == "stale.e2e.test." && ev["result"] == "stale"
	})
	if ev["reason"] != "client response timer" {
		t.Errorf("question event %v", ev)
	}

	// The JSON form: same TTL and Cache-Control.
	jres, err := c.Get(fmt.Sprintf("https://%s/resolve?name=stale.e2e.test&type=A", d.HTTPS))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(jres.Body)
	jres.Body.Close()
	if cc := jres.Header.Get("Cache-Control"); cc != "max-age=30" {
		t.Errorf("JSON Cache-Control %q, want max-age=30: %s", cc, body)
	}

	counters, _ := d.status()["counters"].(map[string]any)
	stale, _ := counters["stale_answers"].(map[string]any)
	if stale["client response timer"] != 2.0 {
		t.Errorf("/status stale_answers %v, want 2 for the client timer", stale)
	}
}
