package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

const selfSignedValidity = 365 * 24 * time.Hour

func (m *Manager) startSelfSigned(cfg Config) error {
	hosts := cfg.SelfSignedHosts
	if len(hosts) == 0 {
		hosts = DefaultSelfSignedHosts
	}
	cert, err := selfSigned(hosts, time.Now())
	if err != nil {
		return err
	}
	served := newServedCert(cert)
	m.current.Store(served)
	m.log.Info().Strs("hosts", hosts).Str("fingerprint", served.fingerprint).
		Time("not_after", cert.Leaf.NotAfter).Msg("self-signed certificate made")
	return nil
}

// selfSigned makes an ECDSA P-256 certificate for hosts (DNS names and IP
// addresses), valid for a year from now. It is its own CA so that clients
// can trust it directly (curl --cacert, dig +tls-ca).
func selfSigned(hosts []string, now time.Time) (*tls.Certificate, error) {
	var dnsNames []string
	var ips []net.IP
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			return nil, fmt.Errorf("tls.self_signed_hosts: empty host name")
		case net.ParseIP(h) != nil:
			ips = append(ips, net.ParseIP(h))
		default:
			dnsNames = append(dnsNames, h)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: serial: %w", err)
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: hosts[0], Organization: []string{"dohfwd self-signed"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clients whose clocks run a little behind
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
