package quicconf

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quic-go/quic-go"
)

var peer = &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4433}

// New connections past Rate per second (Burst at once) are asked for a
// Retry, and let in again as the bucket refills; each Retry is counted.
func TestGateRetriesPastTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &Gate{Rate: 2, Burst: 2}
		for i, want := range []bool{false, false, true} {
			if got := g.verifySourceAddress(peer); got != want {
				t.Fatalf("connection %d: retry %v, want %v", i+1, got, want)
			}
		}
		time.Sleep(time.Second)
		if g.verifySourceAddress(peer) || g.verifySourceAddress(peer) {
			t.Fatal("retry after the bucket refilled")
		}
		if !g.verifySourceAddress(peer) {
			t.Fatal("no retry past the refilled burst")
		}
		if g.Retries() != 2 {
			t.Errorf("Retries %d, want 2", g.Retries())
		}
	})
}

// With MaxHandshakes connections of unvalidated addresses mid-handshake,
// the next one is asked for a Retry; one that ends, or is accepted, makes
// room. Validated addresses are not counted.
func TestGateRetriesPastTheHandshakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &Gate{MaxHandshakes: 2}
		ctx1, end1 := context.WithCancel(context.Background())
		c1, _ := g.connContext(ctx1, &quic.ClientInfo{RemoteAddr: peer})
		g.connContext(context.Background(), &quic.ClientInfo{RemoteAddr: peer})
		g.connContext(context.Background(), &quic.ClientInfo{RemoteAddr: peer, AddrVerified: true})
		if g.Handshakes() != 2 || !g.verifySourceAddress(peer) {
			t.Fatalf("%d handshakes: want 2 and a retry", g.Handshakes())
		}
		end1()
		synctest.Wait()
		if g.Handshakes() != 1 || g.verifySourceAddress(peer) {
			t.Fatalf("after one ended: %d handshakes, want 1 and no retry", g.Handshakes())
		}
		c1.Value(handshakeKey{}).(func())() // ending twice counts once
		if g.Handshakes() != 1 {
			t.Fatalf("%d handshakes after a second end, want 1", g.Handshakes())
		}
	})
}

// The QUIC TLS configuration offers only its ALPN, needs TLS 1.3 and
// keeps the certificate source; the quic.Config refuses 0-RTT and
// unidirectional streams unless asked.
func TestTLSAndConfig(t *testing.T) {
	get := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, nil }
	base := &tls.Config{GetCertificate: get, NextProtos: []string{"h2", "http/1.1"}}
	c := TLS(base, "doq")
	if len(c.NextProtos) != 1 || c.NextProtos[0] != "doq" || c.MinVersion != tls.VersionTLS13 || c.GetCertificate == nil {
		t.Errorf("TLS: %v %v %v", c.NextProtos, c.MinVersion, c.GetCertificate != nil)
	}
	if len(base.NextProtos) != 2 {
		t.Error("TLS changed its base")
	}
	q := Config(Limits{MaxStreams: 250, IdleTimeout: time.Minute})
	if q.Allow0RTT || q.MaxIncomingStreams != 250 || q.MaxIncomingUniStreams >= 0 || q.MaxIdleTimeout != time.Minute {
		t.Errorf("Config: %+v", q)
	}
}
