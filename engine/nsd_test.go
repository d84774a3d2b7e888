package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// The happy path against a real DNS server from Debian: nsd on 127.0.0.1
// with a random port, answering a plain question over UDP and a ~4 KB TXT
// RRset that truncates over UDP and comes whole over TCP.

// startNSD runs nsd for zone example.test. until the test ends and returns
// its address.
func startNSD(t testing.TB) string {
	t.Helper()
	return startNSDWith(t, upstreamtest.NSDOptions{})
}

func startNSDWith(t testing.TB, opts upstreamtest.NSDOptions) string {
	t.Helper()
	var zone strings.Builder
	zone.WriteString("$ORIGIN example.test.\n$TTL 300\n")
	zone.WriteString("@ IN SOA ns.example.test. admin.example.test. 1 3600 600 86400 300\n@ IN NS ns\nns IN A 127.0.0.1\n")
	zone.WriteString("www IN A 192.0.2.80\nwww IN AAAA 2001:db8::80\n")
	for i := range 20 { // 20 x ~200 bytes: ~4 KB, over 1232
		fmt.Fprintf(&zone, "big IN TXT \"%s%02d\"\n", strings.Repeat("x", 198), i)
	}
	return upstreamtest.StartNSDWith(t, opts, upstreamtest.Zone{Origin: "example.test.", Text: zone.String()})
}

func TestNSDHappyPathAndTruncation(t *testing.T) {
	t.Parallel()
	addr := startNSD(t)
	log := &eventLog{}
	e, err := engine.New(engine.Config{Scopes: []engine.ScopeConfig{{Name: "test", Domains: []string{"example.test."}, Servers: []string{addr}}}},
		engine.Options{Network: engine.NativeNetwork{}, Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(name string, qtype uint16) enginetest.Response {
		q := newQuery(name, qtype)
		q.Id = 0xABCD
		q.SetEdns0(4096, true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res := enginetest.Resolve(e, ctx, q)
		if res.Msg.Id != 0xABCD {
			t.Fatalf("client ID %#x", res.Msg.Id)
		}
		return res
	}

	res := ask("WWW.Example.Test.", dns.TypeA)
	if res.Result != engine.ResultAnswer || len(res.Msg.Answer) != 1 || res.Msg.Answer[0].(*dns.A).A.String() != "192.0.2.80" {
		t.Fatalf("www A: %v %v", res.Result, res.Msg)
	}
	res = ask("nope.example.test.", dns.TypeA)
	if res.Result != engine.ResultNXDomain || res.Msg.Rcode != dns.RcodeNameError {
		t.Fatalf("nope: %v rcode %d", res.Result, res.Msg.Rcode)
	}
	res = ask("www.example.test.", dns.TypeMX) // NODATA is an answer
	if res.Result != engine.ResultAnswer || len(res.Msg.Answer) != 0 || len(res.Msg.Ns) == 0 {
		t.Fatalf("NODATA: %v %v", res.Result, res.Msg)
	}

	before := len(log.attemptList())
	res = ask("big.example.test.", dns.TypeTXT)
	var got []string
	for _, a := range log.attemptList()[before:] {
		got = append(got, fmt.Sprintf("%s/%s", a.Transport, a.Outcome))
	}
	if !equalStrings(got, []string{"udp/truncated", "tcp/answer"}) {
		t.Fatalf("attempts %v, want a real truncation answered over TCP", got)
	}
	if res.Result != engine.ResultAnswer || len(res.Msg.Answer) != 20 || res.Msg.Len() < 4000 {
		t.Fatalf("big TXT: %v, %d records, %d bytes", res.Result, len(res.Msg.Answer), res.Msg.Len())
	}
	if c := e.Counters(); c.UpstreamFailed != 0 || c.MismatchedReplies != 0 {
		t.Fatalf("counters %+v", c)
	}
}
