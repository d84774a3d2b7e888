// Command faultyupstream is a DNS server on UDP and TCP that misbehaves on
// purpose, for soak tests (scripts/soak.sh): each query draws one fault at
// the rates given, or is answered with an A record. Loopback only.
//
//	faultyupstream -listen 127.0.0.1:5353 -drop 0.05 -servfail 0.05 -slow 0.1 -slow-delay 300ms \
//	    -garbage 0.02 -mismatch 0.02 -truncate 0.05
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// faults are the rates (0..1) of each misbehaviour, drawn per query.
type faults struct {
	drop, servfail, slow, garbage, mismatch, truncate float64
	slowDelay                                         time.Duration
	ttl                                               uint32
}

func main() {
	var f faults
	listen := flag.String("listen", "127.0.0.1:5353", "UDP and TCP `address` (loopback)")
	flag.Float64Var(&f.drop, "drop", 0, "rate of queries never answered")
	flag.Float64Var(&f.servfail, "servfail", 0, "rate of SERVFAIL answers")
	flag.Float64Var(&f.slow, "slow", 0, "rate of answers sent after -slow-delay")
	flag.DurationVar(&f.slowDelay, "slow-delay", 300*time.Millisecond, "delay of slow answers")
	flag.Float64Var(&f.garbage, "garbage", 0, "rate of random bytes sent instead of an answer")
	flag.Float64Var(&f.mismatch, "mismatch", 0, "rate of answers with a wrong ID (then nothing)")
	flag.Float64Var(&f.truncate, "truncate", 0, "rate of UDP answers with TC set and no records")
	ttl := flag.Uint("ttl", 5, "TTL of the answers, seconds (short: the cache keeps churning)")
	flag.Parse()
	f.ttl = uint32(*ttl)
	ap, err := netip.ParseAddrPort(*listen)
	if err != nil || !ap.Addr().IsLoopback() {
		log.Fatalf("faultyupstream: -listen %q: want a loopback address and port", *listen)
	}
	var served atomic.Uint64
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		served.Add(1)
		f.serve(w, q)
	})
	udp := &dns.Server{Addr: *listen, Net: "udp", Handler: h}
	tcp := &dns.Server{Addr: *listen, Net: "tcp", Handler: h}
	for _, s := range []*dns.Server{udp, tcp} {
		go func() {
			if err := s.ListenAndServe(); err != nil {
				log.Fatalf("faultyupstream: %s: %v", s.Net, err)
			}
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	udp.Shutdown()
	tcp.Shutdown()
	fmt.Fprintf(os.Stderr, "faultyupstream: %d queries\n", served.Load())
}

func (f *faults) serve(w dns.ResponseWriter, q *dns.Msg) {
	_, isUDP := w.RemoteAddr().(*net.UDPAddr)
	r := rand.Float64()
	pick := func(rate float64) bool {
		if r < rate {
			return true
		}
		r -= rate
		return false
	}
	switch {
	case pick(f.drop):
		return
	case pick(f.garbage):
		b := make([]byte, 12+rand.IntN(100))
		for i := range b {
			b[i] = byte(rand.IntN(256))
		}
		w.Write(b)
		return
	case pick(f.mismatch):
		m := f.answer(q)
		m.Id ^= 0x5a5a
		w.WriteMsg(m)
		return
	case pick(f.servfail):
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeServerFailure)
		w.WriteMsg(m)
		return
	case isUDP && pick(f.truncate):
		m := new(dns.Msg)
		m.SetReply(q)
		m.Truncated = true
		w.WriteMsg(m)
		return
	case pick(f.slow):
		time.Sleep(f.slowDelay)
	}
	w.WriteMsg(f.answer(q))
}

func (f *faults) answer(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	if len(q.Question) == 1 && q.Question[0].Qtype == dns.TypeA {
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA,
			Class: dns.ClassINET, Ttl: f.ttl}, A: net.IPv4(192, 0, 2, byte(1+rand.IntN(250))).To4()})
	}
	return m
}
