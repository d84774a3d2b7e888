// Command quicflood measures what a flood of QUIC Initial packets from
// spoofed addresses does to a normal DNS-over-QUIC client (RFC 9250).
// Loopback only.
//
// It first makes -initials distinct client Initial packets (quic-go's own,
// each a new connection with a fresh ClientHello, captured as written and
// never sent), then binds -sources UDP sockets on distinct loopback
// addresses (127.77.x.y) that never answer: the server's replies go
// nowhere, as to spoofed addresses. It measures a normal client's
// latency (a new connection and one question, and one question on a
// connection kept open) for -probes rounds without load, then again while
// the sockets send the Initials at -rate packets per second, and prints
// both medians and their ratio:
//
//	quicflood -target 127.0.0.1:8853 -ca ca.pem -name www.e2e.test
//
// The output's last line is "ratio new_conn=R1 kept_conn=R2"; the caller
// (scripts/doq-flood.sh) compares it with its bound.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"
)

func main() {
	target := flag.String("target", "127.0.0.1:8853", "the DoQ listener (loopback)")
	caFile := flag.String("ca", "", "PEM roots the server's certificate is checked against")
	insecure := flag.Bool("insecure", false, "do not check the server's certificate (a self-signed one)")
	serverName := flag.String("servername", "localhost", "TLS server name")
	name := flag.String("name", "www.e2e.test.", "the name the probes ask (A)")
	initials := flag.Int("initials", 20000, "distinct Initial packets to make")
	sources := flag.Int("sources", 256, "spoofed loopback source addresses")
	rate := flag.Int("rate", 5000, "Initial packets per second during the flood")
	probes := flag.Int("probes", 200, "probe rounds per phase")
	flag.Parse()

	addr, err := net.ResolveUDPAddr("udp", *target)
	if err != nil || !addr.IP.IsLoopback() {
		log.Fatalf("-target %q: a loopback address, please", *target)
	}
	roots := x509.NewCertPool()
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			log.Fatal(err)
		}
		roots.AppendCertsFromPEM(pem)
	}
	tlsConf := &tls.Config{RootCAs: roots, ServerName: *serverName, NextProtos: []string{"doq"}, InsecureSkipVerify: *insecure}
	query := new(dns.Msg)
	query.SetQuestion(dns.Fqdn(*name), dns.TypeA)
	query.Id = 0

	log.Printf("making %d Initial packets", *initials)
	packets := makeInitials(*initials, addr, tlsConf)

	base := measure(addr, tlsConf, query, *probes)
	log.Printf("unloaded: new_conn p50 %v, kept_conn p50 %v", base.newConn, base.keptConn)

	conns := bindSources(*sources)
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { flood(conns, packets, addr, *rate, stop, &sent) })
	time.Sleep(500 * time.Millisecond) // let the flood fill the handshake table
	loaded := measure(addr, tlsConf, query, *probes)
	close(stop)
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	log.Printf("flooded (%d Initials from %d sources): new_conn p50 %v, kept_conn p50 %v", sent.Load(), len(conns), loaded.newConn, loaded.keptConn)
	fmt.Printf("unloaded new_conn_p50_us=%d kept_conn_p50_us=%d\n", base.newConn.Microseconds(), base.keptConn.Microseconds())
	fmt.Printf("flooded new_conn_p50_us=%d kept_conn_p50_us=%d initials=%d\n", loaded.newConn.Microseconds(), loaded.keptConn.Microseconds(), sent.Load())
	fmt.Printf("ratio new_conn=%.2f kept_conn=%.2f\n",
		float64(loaded.newConn)/float64(base.newConn), float64(loaded.keptConn)/float64(base.keptConn))
}

// capture is a PacketConn that keeps the first datagram written and
// delivers nothing: quic-go dials through it, and the Initial is kept.
type capture struct {
	got    chan []byte
	closed chan struct{}
	once   sync.Once
}

func (c *capture) WriteTo(b []byte, _ net.Addr) (int, error) {
	select {
	case c.got <- slices.Clone(b):
	default:
	}
	return len(b), nil
}
func (c *capture) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.closed
	return 0, nil, net.ErrClosed
}
func (c *capture) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *capture) LocalAddr() net.Addr              { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *capture) SetDeadline(time.Time) error      { return nil }
func (c *capture) SetReadDeadline(time.Time) error  { return nil }
func (c *capture) SetWriteDeadline(time.Time) error { return nil }

// makeInitials dials n times through a capture and keeps each first
// datagram: a client Initial with its own connection IDs and keys.
func makeInitials(n int, to net.Addr, tlsConf *tls.Config) [][]byte {
	out := make([][]byte, 0, n)
	for len(out) < n {
		c := &capture{got: make(chan []byte, 1), closed: make(chan struct{})}
		tr := &quic.Transport{Conn: c}
		ctx, cancel := context.WithCancel(context.Background())
		// X25519 alone keeps the ClientHello in one Initial, so that the
		// server can answer each with its whole first flight.
		one := tlsConf.Clone()
		one.CurvePreferences = []tls.CurveID{tls.X25519}
		go tr.Dial(ctx, to, one, &quic.Config{})
		select {
		case p := <-c.got:
			out = append(out, p)
		case <-time.After(2 * time.Second):
		}
		cancel()
		c.Close() // first: the transport's Close waits for its reader
		tr.Close()
	}
	return out
}

// bindSources opens n UDP sockets on distinct loopback addresses, none
// of which ever reads: what the server sends them is lost.
func bindSources(n int) []*net.UDPConn {
	var out []*net.UDPConn
	for i := 0; len(out) < n && i < 65536; i++ {
		ip := net.IPv4(127, 77, byte(i>>8), byte(i)+1)
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip})
		if err != nil {
			continue
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		log.Fatal("no loopback source address could be bound")
	}
	return out
}

// flood sends the packets round-robin over the sources at rate per
// second until stop.
func flood(conns []*net.UDPConn, packets [][]byte, to *net.UDPAddr, rate int, stop <-chan struct{}, sent *atomic.Int64) {
	const tick = 5 * time.Millisecond
	per := max(1, rate*int(tick)/int(time.Second))
	t := time.NewTicker(tick)
	defer t.Stop()
	i := 0
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for range per {
			conns[i%len(conns)].WriteToUDP(packets[i%len(packets)], to)
			i++
		}
		sent.Store(int64(i))
	}
}

type medians struct{ newConn, keptConn time.Duration }

// measure runs rounds of a new connection with one question, and of one
// question on a kept connection, and returns both medians.
func measure(to *net.UDPAddr, tlsConf *tls.Config, q *dns.Msg, rounds int) medians {
	tr := &quic.Transport{Conn: mustListen()}
	defer tr.Close()
	kept, err := dial(tr, to, tlsConf)
	if err != nil {
		log.Fatalf("kept connection: %v", err)
	}
	defer kept.CloseWithError(0, "")
	var fresh, again []time.Duration
	for range rounds {
		start := time.Now()
		c, err := dial(tr, to, tlsConf)
		if err == nil {
			err = ask(c, q)
			c.CloseWithError(0, "")
		}
		if err != nil {
			log.Fatalf("probe on a new connection: %v", err)
		}
		fresh = append(fresh, time.Since(start))
		start = time.Now()
		if err := ask(kept, q); err != nil {
			log.Fatalf("probe on the kept connection: %v", err)
		}
		again = append(again, time.Since(start))
	}
	return medians{median(fresh), median(again)}
}

func mustListen() *net.UDPConn {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		log.Fatal(err)
	}
	return c
}

func dial(tr *quic.Transport, to net.Addr, tlsConf *tls.Config) (*quic.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return tr.Dial(ctx, to, tlsConf, &quic.Config{})
}

// ask sends q on a new stream and reads its framed answer.
func ask(c *quic.Conn, q *dns.Msg) error {
	wire, err := q.Pack()
	if err != nil {
		return err
	}
	st, err := c.OpenStream()
	if err != nil {
		return err
	}
	st.SetDeadline(time.Now().Add(10 * time.Second))
	st.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(wire))), wire...))
	st.Close()
	b, err := io.ReadAll(st)
	if err != nil {
		return err
	}
	m := new(dns.Msg)
	if len(b) < 2 || m.Unpack(b[2:]) != nil || len(m.Answer) == 0 {
		return errors.New("no answer")
	}
	return nil
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}
