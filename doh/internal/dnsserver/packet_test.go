package dnsserver

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/enginetest"
)

// bigResolver answers with 40 A records: more than 512 bytes.
type bigResolver struct{}

func (bigResolver) ResolveMsg(_ context.Context, q *dns.Msg) enginetest.Response {
	m := new(dns.Msg)
	m.SetReply(q)
	for i := range 40 {
		rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2." + string(rune('0'+i%10)))
		rr.(*dns.A).A[3] = byte(i)
		m.Answer = append(m.Answer, rr)
	}
	return enginetest.Response{Msg: m}
}

func (r bigResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(r, ctx, query, dst)
}

func startUDP(t *testing.T, r Resolver) (*Server, string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Resolver: r}
	done := make(chan struct{})
	go func() { defer close(done); s.ServePacket(pc) }()
	t.Cleanup(func() { s.Close(); <-done })
	return s, pc.LocalAddr().String()
}

// Over UDP an answer is cut to the client's payload size with TC set
// (RFC 1035 4.2.1, RFC 6891 6.2.5); with a bigger EDNS size it fits.
func TestUDPAnswerFitsThePayloadSize(t *testing.T) {
	_, addr := startUDP(t, bigResolver{})
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second, UDPSize: 4096}
	m, _, err := c.Exchange(newQuery("big.example.", dns.TypeA, 1), addr)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Truncated || len(m.Answer) >= 40 {
		t.Errorf("no EDNS: TC %v with %d answers, want TC and fewer than 40", m.Truncated, len(m.Answer))
	}
	q := newQuery("big.example.", dns.TypeA, 2)
	q.SetEdns0(4096, false)
	m, _, err = c.Exchange(q, addr)
	if err != nil {
		t.Fatal(err)
	}
	if m.Truncated || len(m.Answer) != 40 {
		t.Errorf("EDNS 4096: TC %v with %d answers, want all 40", m.Truncated, len(m.Answer))
	}
}

// A datagram that is not a query gets nothing; the next query is answered.
func TestUDPGarbageIsDropped(t *testing.T) {
	r := new(fixedResolver)
	_, addr := startUDP(t, r)
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("not dns"))
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Read(make([]byte, 512)); err == nil {
		t.Fatal("garbage got an answer")
	}
	m, _, err := (&dns.Client{Net: "udp", Timeout: 5 * time.Second}).Exchange(newQuery("ok.example.", dns.TypeA, 3), addr)
	if err != nil || len(m.Answer) != 1 {
		t.Fatalf("%v %v", m, err)
	}
	if r.calls.Load() != 1 {
		t.Errorf("resolver asked %d times", r.calls.Load())
	}
}

// hugeResolver answers with 60 TXT records of 100 bytes: about 7 KB.
type hugeResolver struct{}

func (hugeResolver) ResolveMsg(_ context.Context, q *dns.Msg) enginetest.Response {
	m := new(dns.Msg)
	m.SetReply(q)
	for i := range 60 {
		m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60},
			Txt: []string{strings.Repeat(string(rune('a'+i%26)), 100)}})
	}
	return enginetest.Response{Msg: m}
}

func (r hugeResolver) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	return enginetest.ResolveByMsg(r, ctx, query, dst)
}
