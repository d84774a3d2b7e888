// Package certs supplies the TLS certificate of dohfwd's HTTPS listener: a
// self-signed one made at start, one read from files and reloaded when the
// files change, or one obtained and renewed automatically over ACME
// (certmagic), shared between replicas through certmagic's storage: a
// folder, or Redis (package redisstore) for a fleet on separate machines.
package certs

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/rs/zerolog"
)

// Modes of Config.Mode.
const (
	ModeSelfSigned = "self-signed"
	ModeFiles      = "files"
	ModeACME       = "acme"
)

// DefaultSelfSignedHosts are the names a self-signed certificate covers when
// Config.SelfSignedHosts is empty.
var DefaultSelfSignedHosts = []string{"localhost", "127.0.0.1", "::1"}

// Config chooses where the certificate comes from (YAML key tls.*).
type Config struct {
	Mode            string // self-signed (default when empty) | files | acme
	CertFile        string // files mode: PEM certificate chain, leaf first
	KeyFile         string // files mode: PEM private key
	ACME            ACMEConfig
	SelfSignedHosts []string // DNS names and IPs; default DefaultSelfSignedHosts

	tuning tuning // test hooks; zero means production values
}

// ACMEConfig configures automatic certificates (YAML key tls.acme.*).
type ACMEConfig struct {
	Domains []string
	Email   string
	CA      string // ACME directory URL; "" = Let's Encrypt production
	CARoot  string // PEM file of roots to trust for the CA's API (test CAs)
	// Storage is certmagic's storage: a folder ("" = the user data dir),
	// or a redis:// or rediss:// URL shared by the replicas of a fleet.
	Storage string
	// Redis tunes a Redis storage.
	Redis RedisConfig
	// HTTPListen is the address of a plain-HTTP listener the Manager runs to
	// answer HTTP-01 challenges, e.g. ":80"; "" = TLS-ALPN-01 only.
	HTTPListen string
	// WrapHTTPListener, when set, wraps the HTTP-01 listener (PROXY
	// protocol behind a layer-4 balancer, as for the DoH listeners).
	WrapHTTPListener func(net.Listener) net.Listener `json:"-"`
	// TLSALPNListen is the address of the HTTPS listener serving TLSConfig,
	// where TLS-ALPN-01 is answered; "" = ":443". Only its port matters to
	// certmagic, which binds it itself only while nothing else does.
	TLSALPNListen string
	// DisableTLSALPN turns TLS-ALPN-01 off (for HTTPS behind a proxy that
	// terminates TLS); HTTPListen must then be set.
	DisableTLSALPN bool
	// Profile selects an ACME certificate profile offered by the CA
	// (e.g. Let's Encrypt's "shortlived"); "" = the CA's default.
	Profile string
}

// tuning holds the knobs tests shorten; zero values mean the defaults.
type tuning struct {
	filePoll           time.Duration // files mode: how often files are checked
	renewCheckInterval time.Duration // acme: certmagic maintenance period
	renewalWindowRatio float64       // acme: remaining:lifetime ratio that triggers renewal
	// disableARI ignores the CA's renewal info, whose window Pebble opens
	// at issuance for short certificates, so that only the ratio above
	// says when to renew.
	disableARI bool
}

const defaultFilePoll = time.Second

// Manager holds the current certificate and keeps it fresh.
type Manager struct {
	mode string
	log  zerolog.Logger

	// self-signed and files modes: the certificate served to every client.
	current atomic.Pointer[servedCert]

	acme *acmeState // acme mode only

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closers   []func() // run last by Close (the shared store)
	closeErr  error
}

// servedCert is a certificate with its precomputed fingerprint.
type servedCert struct {
	cert        *tls.Certificate
	fingerprint string
}

func newServedCert(cert *tls.Certificate) *servedCert {
	return &servedCert{cert: cert, fingerprint: fingerprint(cert.Leaf.Raw)}
}

// fingerprint is the hex SHA-256 of a DER certificate.
func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// New validates cfg and prepares the certificate. Self-signed and files
// certificates are ready when New returns; in acme mode New returns at once
// and obtains the certificate in the background (see Ready), because the
// CA's TLS-ALPN-01 validation must reach the HTTPS listener that serves
// TLSConfig. Bind that listener before the CA gets to validate — in practice
// right after New — or certmagic will bind the port itself for the challenge.
// Cancelling ctx does not stop the background work; Close does.
func New(ctx context.Context, cfg Config, log zerolog.Logger) (*Manager, error) {
	log = log.With().Str("component", "certs").Logger()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Manager{mode: cfg.Mode, log: log, cancel: cancel}
	if m.mode == "" {
		m.mode = ModeSelfSigned
	}
	var err error
	switch m.mode {
	case ModeSelfSigned:
		err = m.startSelfSigned(cfg)
	case ModeFiles:
		err = m.startFiles(runCtx, cfg)
	case ModeACME:
		err = m.startACME(runCtx, cfg)
	default:
		err = fmt.Errorf("tls.mode: unknown mode %q (want %s, %s or %s)", cfg.Mode, ModeSelfSigned, ModeFiles, ModeACME)
	}
	if err != nil {
		cancel()
		m.wg.Wait()
		for _, c := range m.closers {
			c()
		}
		return nil, err
	}
	return m, nil
}

// Mode reports the certificate source in use.
func (m *Manager) Mode() string { return m.mode }

// TLSConfig returns a configuration for the HTTPS listener. Its
// GetCertificate always hands out the current certificate, so renewals and
// reloads take effect without a restart. In acme mode it also answers
// TLS-ALPN-01 challenges (ALPN acme-tls/1).
func (m *Manager) TLSConfig() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
	}
	if m.acme != nil {
		cfg.GetCertificate = m.acme.magic.GetCertificate
		cfg.NextProtos = append(cfg.NextProtos, acmeTLS1Protocol)
		return cfg
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return m.current.Load().cert, nil
	}
	return cfg
}

// Fingerprint is the hex SHA-256 of the leaf certificate served now, or ""
// while an ACME certificate is still being obtained.
func (m *Manager) Fingerprint() string {
	if m.acme != nil {
		if leaf := m.acme.currentLeaf(); leaf != nil {
			return fingerprint(leaf.Raw)
		}
		return ""
	}
	return m.current.Load().fingerprint
}

// Ready returns a channel closed once a certificate is available. In
// self-signed and files modes it is closed from the start.
func (m *Manager) Ready() <-chan struct{} {
	if m.acme != nil {
		return m.acme.ready
	}
	return closedChan
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// WaitReady blocks until a certificate is available or ctx ends.
func (m *Manager) WaitReady(ctx context.Context) error {
	select {
	case <-m.Ready():
		return nil
	case <-ctx.Done():
		if m.acme != nil {
			if err := m.acme.lastError(); err != nil {
				return fmt.Errorf("waiting for certificate for %v: %w (last attempt: %v)", m.acme.domains, ctx.Err(), err)
			}
		}
		return fmt.Errorf("waiting for certificate: %w", ctx.Err())
	}
}

// Close stops file watching and ACME maintenance and releases storage locks.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.cancel()
		if m.acme != nil && m.acme.http01 != nil {
			m.closeErr = m.acme.http01.Close()
		}
		m.wg.Wait()
		if m.acme != nil {
			m.acme.cache.Stop() // also releases storage locks this process holds
		}
		for _, c := range m.closers {
			c()
		}
	})
	return m.closeErr
}

// goTracked runs f in a goroutine that Close waits for.
func (m *Manager) goTracked(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// compile-time check that certmagic's GetCertificate fits tls.Config.
var _ func(*tls.ClientHelloInfo) (*tls.Certificate, error) = (*certmagic.Config)(nil).GetCertificate
