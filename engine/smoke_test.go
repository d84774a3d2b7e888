package engine

import (
	"context"
	"net"
	"testing"

	"github.com/miekg/dns"
)

func TestSmokeRealUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		rr, _ := dns.NewRR(r.Question[0].Name + " 60 IN A 192.0.2.1")
		m.Answer = append(m.Answer, rr)
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	defer srv.Shutdown()
	e, err := New(Config{FallbackServers: []string{pc.LocalAddr().String()}}, Options{Network: NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	q := new(dns.Msg)
	q.SetQuestion("Example.ORG.", dns.TypeA)
	q.Id = 4242
	r := e.Resolve(context.Background(), q)
	if r.Result != ResultAnswer || r.Msg.Id != 4242 || len(r.Msg.Answer) != 1 {
		t.Fatalf("got %v %v", r.Result, r.Msg)
	}
	t.Log(r.Msg, e.Status())
}
