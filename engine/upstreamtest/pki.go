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
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// PKI is a private CA and certificates for encrypted test upstreams (DoT,
// DoH): one valid leaf, one expired, one from a CA nobody trusts, so
// tests verify TLS names and chains for real.
type PKI struct {
	CAFile string         // the CA, PEM: what upstream_tls.ca_file names
	Pool   *x509.CertPool // the CA as a pool
	// Leaf is valid for the names given and 127.0.0.1, ::1; CertFile and
	// KeyFile hold it as PEM for real servers (unbound, dnsdist).
	Leaf              tls.Certificate
	CertFile, KeyFile string
	// Expired is signed by the CA for the same names, and expired an
	// hour ago.
	Expired tls.Certificate
	// Untrusted is for the same names, signed by another CA.
	Untrusted tls.Certificate
	// Pin is Leaf's SPKI pin as a server's ?pin= takes it.
	Pin string
}

// NewPKI makes a PKI whose leaves are for names (and 127.0.0.1, ::1),
// its files in a temporary folder of t.
func NewPKI(t testing.TB, names ...string) *PKI {
	t.Helper()
	now := time.Now()
	ca, caKey := newCA(t, "upstreamtest CA")
	other, otherKey := newCA(t, "upstreamtest untrusted CA")
	p := &PKI{Pool: x509.NewCertPool()}
	p.Pool.AddCert(ca)
	var leafKey *ecdsa.PrivateKey
	p.Leaf, leafKey = newLeaf(t, ca, caKey, names, now.Add(-time.Hour), now.Add(24*time.Hour))
	p.Expired, _ = newLeaf(t, ca, caKey, names, now.Add(-48*time.Hour), now.Add(-time.Hour))
	p.Untrusted, _ = newLeaf(t, other, otherKey, names, now.Add(-time.Hour), now.Add(24*time.Hour))
	sum := sha256.Sum256(p.Leaf.Leaf.RawSubjectPublicKeyInfo)
	p.Pin = "sha256/" + base64.StdEncoding.EncodeToString(sum[:])

	dir := t.TempDir()
	p.CAFile = filepath.Join(dir, "ca.pem")
	p.CertFile = filepath.Join(dir, "cert.pem")
	p.KeyFile = filepath.Join(dir, "key.pem")
	keyDER, err := x509.MarshalPKCS8PrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{
		p.CAFile:   {Type: "CERTIFICATE", Bytes: ca.Raw},
		p.CertFile: {Type: "CERTIFICATE", Bytes: p.Leaf.Certificate[0]},
		p.KeyFile:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

var serial atomic.Int64

func nextSerial() *big.Int { return big.NewInt(time.Now().UnixNano() + serial.Add(1)) }

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: time.Now().Add(72 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func newLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string, from, until time.Time) (tls.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: "upstreamtest"},
		NotBefore: from, NotAfter: until,
		DNSNames: names, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, key
}
