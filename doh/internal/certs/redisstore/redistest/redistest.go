// Package redistest runs a real redis-server on a loopback port for tests,
// one per test, which can be stopped and started again with its data kept
// (append-only file, fsync on every write), as a Redis outage would.
package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/scripts/testtool/syncbuf"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// Options choose how the server is reached.
type Options struct {
	// Password, when set, is required of clients (requirepass).
	Password string
	// TLS serves TLS only (rediss://), with a certificate for 127.0.0.1
	// from a CA made for the test: Server.CAFile.
	TLS bool
}

// Server is one redis-server process.
type Server struct {
	Addr   string // 127.0.0.1:port
	CAFile string // with Options.TLS: the PEM root that signed the server
	opts   Options
	args   []string // TLS and password arguments
	t      *testing.T
	bin    string
	dir    string
	port   int

	mu  sync.Mutex
	cmd *exec.Cmd
	out *output
}

// output is the server's output, written by exec's copying goroutines.
type output = syncbuf.Buffer

// Find returns the redis-server binary; missing, it fails the test under
// CI and skips it loudly elsewhere (testtool.Find).
func Find(t testing.TB) string {
	t.Helper()
	return testtool.Find(t, "redis-server", "scripts/setup.d/35-redis.sh: apt-get install redis-server")
}

// Start runs redis-server on a free loopback port until the test ends.
func Start(t *testing.T) *Server { t.Helper(); return StartWith(t, Options{}) }

// StartWith runs redis-server with o until the test ends.
func StartWith(t *testing.T, o Options) *Server {
	t.Helper()
	s := &Server{t: t, bin: Find(t), dir: t.TempDir(), opts: o}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	if o.Password != "" {
		s.args = append(s.args, "--requirepass", o.Password)
	}
	if o.TLS {
		ca, cert, key := writeTLSFiles(t, s.dir)
		s.CAFile = ca
		s.args = append(s.args, "--port", "0", "--tls-port", strconv.Itoa(s.port), "--tls-cert-file", cert,
			"--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no")
	} else {
		s.args = append(s.args, "--port", strconv.Itoa(s.port))
	}
	s.Resume()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("redis-server output:\n%s", s.out)
		}
	})
	return s
}

// Port is the server's port.
func (s *Server) Port() int { return s.port }

// URL is the redis:// URL of the server.
func (s *Server) URL() string {
	if s.opts.TLS {
		return "rediss://" + s.Addr + "/0"
	}
	return "redis://" + s.Addr + "/0"
}

// Resume starts the server (again) on the same port and data.
func (s *Server) Resume() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	if s.out == nil {
		s.out = &output{}
	}
	args := append([]string{"--bind", "127.0.0.1", "--dir", s.dir, "--save", "", "--appendonly", "yes",
		"--appendfsync", "always", "--protected-mode", "no"}, s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server did not listen on %s: %v\n%s", s.Addr, err, s.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: an outage, not a shutdown).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// String is the server's address.
func (s *Server) String() string { return fmt.Sprintf("redis-server %s", s.Addr) }

// writeTLSFiles makes a CA and a server certificate for 127.0.0.1.
func writeTLSFiles(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	caCert, _ := x509.ParseCertificate(caDER)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der),
		write("server.key", "PRIVATE KEY", keyDER)
}
