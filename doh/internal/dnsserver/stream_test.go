package dnsserver

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// RFC 7766, section 6.2.1.1: queries pipelined on one connection are
// answered as their answers come, not in the order they were sent. The
// upstream holds the first query's answer; the others overtake it.
func TestDoTPipelinedQueriesAnsweredOutOfOrder(t *testing.T) {
	eng := newEngine(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg == nil {
			return upstreamtest.Action{}
		}
		reply := upstreamtest.Reply{Msg: upstreamtest.ReplyTo(q.Msg, dns.RcodeSuccess, "@ 60 IN A 192.0.2.1")}
		if strings.HasPrefix(q.Msg.Question[0].Name, "slow.") {
			reply.Delay = 700 * time.Millisecond
		}
		return upstreamtest.Action{Replies: []upstreamtest.Reply{reply}}
	})
	_, addr := startDoT(t, eng, Limits{})
	c := dialDoT(t, addr)

	names := []string{"slow.example.", "a.example.", "b.example.", "c.example."}
	var burst []byte
	for i, n := range names {
		burst = append(burst, frame(t, newQuery(n, dns.TypeA, uint16(100+i)))...)
	}
	if _, err := c.Write(burst); err != nil { // all four in one write
		t.Fatal(err)
	}
	var order []string
	for range names {
		m := readAnswer(t, c)
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("answer %v", m)
		}
		if want := names[m.Id-100]; m.Question[0].Name != want {
			t.Fatalf("answer ID %d is for %s, want %s", m.Id, m.Question[0].Name, want)
		}
		order = append(order, m.Question[0].Name)
	}
	if order[len(order)-1] != "slow.example." {
		t.Errorf("answer order %v: the slow answer should come last", order)
	}
}

// Bad input closes the connection that sent it, and only that one: a
// length prefix past MaxQuerySize, bytes that are not a DNS query, a query
// stalled half-sent past ReadTimeout.
func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	r := new(fixedResolver)
	l := Limits{ReadTimeout: 300 * time.Millisecond, MaxQuerySize: 512}
	var mu sync.Mutex
	var reasons []string
	cert, _ := testCert()
	s := &Server{Resolver: r, Limits: l, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		OnDrop: func(_ net.Addr, why string) { mu.Lock(); reasons = append(reasons, why); mu.Unlock() }}
	addr := serveStream(t, s)
	good := dialDoT(t, addr)

	half := frame(t, newQuery("half.example.", dns.TypeA, 9))
	garbage := []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	cases := map[string][]byte{
		"length past the limit": {0x02, 0x01}, // 513 > 512
		"garbage":               garbage,
		"response, not a query": frame(t, new(dns.Msg).SetReply(newQuery("x.example.", dns.TypeA, 1))),
		"half-sent and stalled": half[:len(half)/2],
	}
	for name, send := range cases {
		t.Run(name, func(t *testing.T) {
			bad := dialDoT(t, addr)
			if _, err := bad.Write(send); err != nil {
				t.Fatal(err)
			}
			if !closedByServer(bad, 5*time.Second) {
				t.Fatal("the server kept the connection open")
			}
			good.Write(frame(t, newQuery("ok.example.", dns.TypeA, 7)))
			if m := readAnswer(t, good); m.Id != 7 || len(m.Answer) != 1 {
				t.Fatalf("the other connection got %v", m)
			}
		})
	}
	if r.calls.Load() != int64(len(cases)) {
		t.Errorf("resolver asked %d times, want %d (only the good queries)", r.calls.Load(), len(cases))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) != len(cases) {
		t.Errorf("drops reported: %q, want one per bad connection", reasons)
	}
}

// A query arriving slowly but within ReadTimeout is answered: the timeout
// bounds a stall, not a client's pace.
func TestSlowButSteadyQueryIsAnswered(t *testing.T) {
	_, addr := startTCP(t, new(fixedResolver), Limits{ReadTimeout: 400 * time.Millisecond})
	c := dialTCP(t, addr)
	b := frame(t, newQuery("slow.example.", dns.TypeA, 3))
	c.Write(b[:5])
	time.Sleep(150 * time.Millisecond)
	c.Write(b[5:])
	if m := readAnswer(t, c); m.Id != 3 {
		t.Fatalf("got %v", m)
	}
}

// Queries the server cannot take get the DNS errors the DoH front end
// gives, and the connection stays open.
func TestBadQueriesGetDNSErrors(t *testing.T) {
	r := new(fixedResolver)
	_, addr := startTCP(t, r, Limits{})
	c := dialTCP(t, addr)

	notify := newQuery("example.", dns.TypeSOA, 1)
	notify.Opcode = dns.OpcodeNotify
	two := newQuery("example.", dns.TypeA, 2)
	two.Question = append(two.Question, two.Question[0])
	axfr := newQuery("example.", dns.TypeAXFR, 3)
	v1 := newQuery("example.", dns.TypeA, 4)
	v1.SetEdns0(1232, false)
	v1.IsEdns0().SetVersion(1)
	for _, tc := range []struct {
		q     *dns.Msg
		rcode int
	}{{notify, dns.RcodeNotImplemented}, {two, dns.RcodeFormatError}, {axfr, dns.RcodeNotImplemented}, {v1, dns.RcodeBadVers}} {
		c.Write(frame(t, tc.q))
		m := readAnswer(t, c)
		if m.Id != tc.q.Id || m.Rcode != tc.rcode {
			t.Errorf("query %d: rcode %s, want %s", tc.q.Id, dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
		}
	}
	c.Write(frame(t, newQuery("fine.example.", dns.TypeA, 5)))
	if m := readAnswer(t, c); m.Id != 5 || len(m.Answer) != 1 {
		t.Fatalf("after the errors: %v", m)
	}
	if r.calls.Load() != 1 {
		t.Errorf("resolver asked %d times, want 1", r.calls.Load())
	}
}

// RFC 8467: the answer to a padded query is padded to a multiple of 468
// bytes; an unpadded query gets an unpadded answer.
func TestPaddedQueryGetsPaddedAnswer(t *testing.T) {
	_, addr := startDoT(t, new(fixedResolver), Limits{})
	c := dialDoT(t, addr)
	q := newQuery("pad.example.", dns.TypeA, 1)
	q.SetEdns0(1232, false)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 100)})
	c.Write(frame(t, q))
	wire := readRaw(t, c)
	if len(wire)%PaddingBlock != 0 {
		t.Errorf("padded answer is %d bytes, not a multiple of %d", len(wire), PaddingBlock)
	}
	c.Write(frame(t, newQuery("plain.example.", dns.TypeA, 2)))
	m := readAnswer(t, c)
	if m.IsEdns0() != nil {
		t.Errorf("an unpadded query got an OPT record: %v", m)
	}
}

// A connection with more questions open than MaxInFlight is not read
// further until one ends; all are answered.
func TestMaxInFlightHoldsReading(t *testing.T) {
	eng := newEngine(t, upstreamtest.Delay(200*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.9")))
	s, addr := startTCP(t, eng, Limits{MaxInFlight: 2})
	c := dialTCP(t, addr)
	var burst []byte
	for i := range 6 {
		burst = append(burst, frame(t, newQuery("n"+string(rune('a'+i))+".example.", dns.TypeA, uint16(i)))...)
	}
	c.Write(burst)
	time.Sleep(100 * time.Millisecond)
	if n := s.InFlight(); n != 2 {
		t.Errorf("in flight %d, want 2", n)
	}
	for range 6 {
		readAnswer(t, c)
	}
}

// Shutdown answers the question in flight, then closes the connection.
func TestShutdownAnswersQuestionsInFlight(t *testing.T) {
	eng := newEngine(t, upstreamtest.Delay(400*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.9")))
	s, addr := startDoT(t, eng, Limits{})
	busy, idle := dialDoT(t, addr), dialDoT(t, addr)
	idle.Write(frame(t, newQuery("first.example.", dns.TypeA, 1)))
	readAnswer(t, idle)
	busy.Write(frame(t, newQuery("slow.example.", dns.TypeA, 2)))
	time.Sleep(50 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(t.Context()) }()
	if !closedByServer(idle, 2*time.Second) {
		t.Error("the idle connection stayed open")
	}
	if m := readAnswer(t, busy); m.Id != 2 || len(m.Answer) != 1 {
		t.Fatalf("in-flight answer %v", m)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !closedByServer(busy, 2*time.Second) {
		t.Error("the busy connection stayed open after its answer")
	}
}

func TestLengthPrefixFramesTheAnswer(t *testing.T) {
	_, addr := startTCP(t, new(fixedResolver), Limits{})
	c := dialTCP(t, addr)
	c.Write(frame(t, newQuery("x.example.", dns.TypeA, 1)))
	var n [2]byte
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(n[:]); err != nil {
		t.Fatal(err)
	}
	if l := binary.BigEndian.Uint16(n[:]); l < headerSize {
		t.Fatalf("length %d", l)
	}
}

// An answer bigger than the write buffer is framed whole, and the next
// small one after it too.
func TestLargeAnswerOverTCP(t *testing.T) {
	_, addr := startTCP(t, hugeResolver{}, Limits{})
	c := dialTCP(t, addr)
	for i := range 3 {
		c.Write(frame(t, newQuery("big.example.", dns.TypeTXT, uint16(i))))
		if m := readAnswer(t, c); m.Id != uint16(i) || len(m.Answer) != 60 {
			t.Fatalf("answer %d: %d records", i, len(m.Answer))
		}
	}
}
