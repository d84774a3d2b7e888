package upstreamtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// CA is a test certificate authority for encrypted upstreams: it signs
// server certificates for names of the test's choosing, valid or expired.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

// NewCA makes a CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstreamtest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{cert: cert, key: key, der: der}
}

// Pool is a pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// PEMFile writes the CA certificate into a PEM file in dir and returns
// its path (upstream_tls.ca_file).
func (ca *CA) PEMFile(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Leaf is a server certificate for names (DNS names, or IP addresses),
// valid until notAfter (an expired one when in the past).
func (ca *CA) Leaf(t testing.TB, notAfter time.Time, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der, ca.der}, PrivateKey: key, Leaf: leaf}
}

// WriteLeaf writes cert and its key as PEM files in dir (for a real
// server: unbound, kresd, dnsdist) and returns their paths.
func WriteLeaf(t testing.TB, dir, name string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	os.WriteFile(certFile, chain, 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	return certFile, keyFile
}

// DoTServer is a programmable DNS-over-TLS server on loopback: each query
// goes to the handler on a goroutine of its own, so replies leave in the
// order their delays give, not the queries' (pipelining, RFC 7766 §6.2.1.1).
type DoTServer struct {
	addr netip.AddrPort
	h    Handler
	ln   net.Listener
	cfg  *tls.Config

	// Counters the tests read.
	Accepted   atomic.Int64 // TCP connections accepted
	Handshakes atomic.Int64 // TLS handshakes completed
	Resumed    atomic.Int64 // of which resumed a session
	Open       atomic.Int64 // connections open now
	MaxOpen    atomic.Int64 // the most open at once

	mu      sync.Mutex
	queries []Query
	conns   map[net.Conn]bool
	wg      sync.WaitGroup
	done    chan struct{}
	// idle closes a connection that saw no query for that long (0: never).
	idle atomic.Int64
}

// StartDoT runs a DoT server with cert for h on 127.0.0.1 until the test
// ends. TLS 1.3, session tickets on (resumption).
func StartDoT(t testing.TB, cert tls.Certificate, h Handler) *DoTServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &DoTServer{addr: ln.Addr().(*net.TCPAddr).AddrPort(), h: h, ln: ln, conns: map[net.Conn]bool{}, done: make(chan struct{}),
		cfg: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, NextProtos: []string{"dot"}}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// Addr is the server's address.
func (s *DoTServer) Addr() netip.AddrPort { return s.addr }

// URL is the server as configuration writes it, with TLS name name.
func (s *DoTServer) URL(name string) string { return "tls://" + s.addr.String() + "#" + name }

// CloseIdle makes the server close each connection that saw no query for
// d, as DoT servers do (RFC 7766 §6.2.3).
func (s *DoTServer) CloseIdle(d time.Duration) { s.idle.Store(int64(d)) }

// DropConnections closes every open connection at once, as a server
// restarting does.
func (s *DoTServer) DropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close()
	}
}

// Queries returns every query read so far, in order.
func (s *DoTServer) Queries() []Query {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Query(nil), s.queries...)
}

// Close stops the server and waits for its goroutines.
func (s *DoTServer) Close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	s.ln.Close()
	s.DropConnections()
	s.wg.Wait()
}

func (s *DoTServer) accept() {
	defer s.wg.Done()
	for {
		raw, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.Accepted.Add(1)
		c := tls.Server(raw, s.cfg)
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		n := s.Open.Add(1)
		for m := s.MaxOpen.Load(); n > m && !s.MaxOpen.CompareAndSwap(m, n); m = s.MaxOpen.Load() {
		}
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *DoTServer) serve(c *tls.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.Open.Add(-1)
	}()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	s.Handshakes.Add(1)
	if c.ConnectionState().DidResume {
		s.Resumed.Add(1)
	}
	from := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	var wmu sync.Mutex
	var lenBuf [2]byte
	for {
		if d := time.Duration(s.idle.Load()); d > 0 {
			c.SetReadDeadline(time.Now().Add(d))
		}
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		c.SetReadDeadline(time.Time{})
		m := make([]byte, binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(c, m); err != nil {
			return
		}
		q := s.log(m, from)
		a := s.h(q)
		s.reply(c, &wmu, a)
	}
}

// reply sends a's replies on c, each after its delay, without holding the
// reader (so replies leave in the order of their delays): a timer for a
// delayed one, a goroutine only for one held Until a channel closes.
func (s *DoTServer) reply(c *tls.Conn, wmu *sync.Mutex, a Action) {
	write := func(r Reply) {
		b := r.wire()
		framed := binary.BigEndian.AppendUint16(nil, uint16(len(b)))
		framed = append(framed, b...)
		if r.Cut {
			framed = framed[:len(framed)/2]
		}
		wmu.Lock()
		c.Write(framed)
		wmu.Unlock()
	}
	held := a.Close
	for _, r := range a.Replies {
		held = held || r.Until != nil || len(a.Replies) > 1
	}
	if !held {
		for _, r := range a.Replies {
			if r.Delay <= 0 {
				write(r)
				continue
			}
			s.wg.Add(1)
			time.AfterFunc(r.Delay, func() {
				defer s.wg.Done()
				select {
				case <-s.done:
				default:
					write(r)
				}
			})
		}
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for _, r := range a.Replies {
			if !s.wait(r.Until, r.Delay) {
				return
			}
			write(r)
		}
		if a.Close {
			c.Close()
		}
	}()
}

func (s *DoTServer) log(m []byte, from netip.AddrPort) Query {
	q := Query{Transport: "dot", From: from, At: time.Now()}
	msg := newMsg(m)
	q.Msg = msg
	s.mu.Lock()
	q.N = len(s.queries)
	s.queries = append(s.queries, q)
	s.mu.Unlock()
	return q
}

func (s *DoTServer) wait(until <-chan struct{}, d time.Duration) bool {
	if until != nil {
		select {
		case <-until:
		case <-s.done:
			return false
		}
	}
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// StartStallingTLS listens on loopback, accepts TCP connections and never
// answers a handshake: a server stuck before TLS. It returns the address.
func StartStallingTLS(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// newMsg unpacks m, or nil.
func newMsg(m []byte) *dns.Msg {
	msg := new(dns.Msg)
	if msg.Unpack(m) != nil {
		return nil
	}
	return msg
}

// Pin is cert's leaf SPKI pin as a server string takes it,
// "sha256/BASE64".
func Pin(cert tls.Certificate) string {
	sum := sha256.Sum256(cert.Leaf.RawSubjectPublicKeyInfo)
	return "sha256/" + base64.StdEncoding.EncodeToString(sum[:])
}
