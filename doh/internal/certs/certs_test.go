package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestSelfSignedServesP256CertificateForDefaultHosts(t *testing.T) {
	t.Parallel()
	log, _ := testLogger(t)
	m, err := New(context.Background(), Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, m)
	if m.Mode() != ModeSelfSigned {
		t.Errorf("Mode() = %q, want %q", m.Mode(), ModeSelfSigned)
	}
	addr := serveTLS(t, m)

	// Trust the presented certificate itself, as `curl --cacert` would.
	leaf, err := handshakeLeaf(t, addr, "localhost", nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := handshakeLeaf(t, addr, name, roots); err != nil {
			t.Errorf("handshake verifying for %q: %v", name, err)
		}
	}
	if _, err := handshakeLeaf(t, addr, "example.org", roots); err == nil {
		t.Error("certificate verified for example.org, which it must not cover")
	}
	key, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Errorf("public key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	if life := leaf.NotAfter.Sub(time.Now()); life < 360*24*time.Hour || life > 366*24*time.Hour {
		t.Errorf("certificate valid for another %v, want about a year", life)
	}
	if got, want := m.Fingerprint(), fingerprint(leaf.Raw); got != want {
		t.Errorf("Fingerprint() = %s, served certificate has %s", got, want)
	}
	if len(m.Fingerprint()) != 64 {
		t.Errorf("Fingerprint() = %q, want 64 hex digits", m.Fingerprint())
	}
}

func TestSelfSignedCustomHostsAndALPN(t *testing.T) {
	t.Parallel()
	log, _ := testLogger(t)
	m, err := New(context.Background(), Config{Mode: ModeSelfSigned, SelfSignedHosts: []string{"doh.example", "192.0.2.7"}}, log)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, m)
	leaf := m.current.Load().cert.Leaf
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "doh.example" {
		t.Errorf("DNSNames = %v, want [doh.example]", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("192.0.2.7")) {
		t.Errorf("IPAddresses = %v, want [192.0.2.7]", leaf.IPAddresses)
	}
	cfg := m.TLSConfig()
	if strings.Join(cfg.NextProtos, ",") != "h2,http/1.1" {
		t.Errorf("NextProtos = %v, want [h2 http/1.1]", cfg.NextProtos)
	}
	select {
	case <-m.Ready():
	default:
		t.Error("Ready() not closed for a self-signed certificate")
	}
}

func TestNewRejectsBadConfigurationClearly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := newTestCert(t, "a.example"), newTestCert(t, "b.example")
	aCert, _ := pemPair(t, a)
	_, bKey := pemPair(t, b)
	mismatchCert, mismatchKey := filepath.Join(dir, "a.pem"), filepath.Join(dir, "b.key")
	if err := os.WriteFile(mismatchCert, aCert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mismatchKey, bKey, 0o600); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "root.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"unknown mode", Config{Mode: "x"}, `tls.mode: unknown mode "x"`},
		{"files without cert", Config{Mode: ModeFiles, KeyFile: mismatchKey}, "tls.cert_file: required"},
		{"files without key", Config{Mode: ModeFiles, CertFile: mismatchCert}, "tls.key_file: required"},
		{"missing cert file", Config{Mode: ModeFiles, CertFile: filepath.Join(dir, "nope.pem"), KeyFile: mismatchKey}, "tls.cert_file: open"},
		{"mismatched pair", Config{Mode: ModeFiles, CertFile: mismatchCert, KeyFile: mismatchKey}, "private key does not match public key"},
		{"empty self-signed host", Config{SelfSignedHosts: []string{"localhost", " "}}, "tls.self_signed_hosts: empty host name"},
		{"acme without domains", Config{Mode: ModeACME}, "tls.acme.domains: at least one domain"},
		{"acme localhost", Config{Mode: ModeACME, ACME: ACMEConfig{Domains: []string{"localhost"}}}, `tls.acme.domains: "localhost"`},
		{"acme plain http CA", Config{Mode: ModeACME, ACME: ACMEConfig{Domains: []string{"doh.example"}, CA: "http://ca.example/dir", Storage: dir}}, "tls.acme.ca:"},
		{"acme bad root", Config{Mode: ModeACME, ACME: ACMEConfig{Domains: []string{"doh.example"}, CARoot: notPEM, Storage: dir}}, "tls.acme.ca_root"},
		{"acme bad http listen", Config{Mode: ModeACME, ACME: ACMEConfig{Domains: []string{"doh.example"}, HTTPListen: "80", Storage: dir}}, "tls.acme.http_listen"},
		{"acme no challenge", Config{Mode: ModeACME, ACME: ACMEConfig{Domains: []string{"doh.example"}, DisableTLSALPN: true, Storage: dir}}, "tls.acme.http_listen: required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(context.Background(), tc.cfg, zerolog.Nop())
			if err == nil {
				m.Close()
				t.Fatalf("New succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if tc.cfg.Mode == ModeFiles && tc.cfg.CertFile != "" && tc.cfg.KeyFile != "" &&
				!strings.Contains(err.Error(), "tls.") {
				t.Errorf("error %q does not name the configuration key", err)
			}
		})
	}
}
