package certs

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
)

// acmeTLS1Protocol is the ALPN protocol of TLS-ALPN-01 (RFC 8737).
const acmeTLS1Protocol = "acme-tls/1"

// acmeState is the ACME half of a Manager.
type acmeState struct {
	domains []string
	ca      string
	magic   *certmagic.Config
	cache   *certmagic.Cache
	issuer  *certmagic.ACMEIssuer
	ready   chan struct{}
	http01  *http.Server // nil unless HTTPListen is set

	readyOnce sync.Once
	mu        sync.Mutex
	lastErr   error
}

// acmeSettings is ACMEConfig checked and with defaults filled in.
type acmeSettings struct {
	domains      []string
	ca           string
	roots        *x509.CertPool
	storage      string
	listenHost   string
	httpPort     int
	tlsALPNPort  int
	httpListen   string
	disableALPN  bool
	disableHTTP  bool
	email        string
	profile      string
	renewCheck   time.Duration
	renewalRatio float64
}

func checkACME(cfg Config) (acmeSettings, error) {
	a := cfg.ACME
	s := acmeSettings{
		ca:           a.CA,
		storage:      a.Storage,
		httpListen:   a.HTTPListen,
		disableALPN:  a.DisableTLSALPN,
		disableHTTP:  a.HTTPListen == "",
		email:        strings.TrimSpace(a.Email),
		profile:      a.Profile,
		renewCheck:   cfg.tuning.renewCheckInterval,
		renewalRatio: cfg.tuning.renewalWindowRatio,
	}
	if len(a.Domains) == 0 {
		return s, fmt.Errorf("tls.acme.domains: at least one domain is required when tls.mode is %q", ModeACME)
	}
	for _, d := range a.Domains {
		d = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(d), "."))
		if !certmagic.SubjectQualifiesForPublicCert(d) {
			return s, fmt.Errorf("tls.acme.domains: %q cannot get a certificate from an ACME CA", d)
		}
		s.domains = append(s.domains, d)
	}
	if s.ca == "" {
		s.ca = certmagic.LetsEncryptProductionCA
	}
	if u, err := url.Parse(s.ca); err != nil || u.Scheme != "https" || u.Host == "" {
		return s, fmt.Errorf("tls.acme.ca: %q is not an https:// ACME directory URL", s.ca)
	}
	if a.CARoot != "" {
		pemBytes, err := os.ReadFile(a.CARoot)
		if err != nil {
			return s, fmt.Errorf("tls.acme.ca_root: %w", err)
		}
		s.roots = x509.NewCertPool()
		if !s.roots.AppendCertsFromPEM(pemBytes) {
			return s, fmt.Errorf("tls.acme.ca_root %q: no PEM certificate found", a.CARoot)
		}
	}
	if s.storage == "" {
		s.storage = defaultStorage()
	}
	if !IsRedisURL(s.storage) {
		if err := os.MkdirAll(s.storage, 0o700); err != nil {
			return s, fmt.Errorf("tls.acme.storage: %w", err)
		}
	}
	alpnListen := a.TLSALPNListen
	if alpnListen == "" {
		alpnListen = ":443"
	}
	host, port, err := splitListen(alpnListen)
	if err != nil {
		return s, fmt.Errorf("tls.acme: HTTPS listen address %q: %w", alpnListen, err)
	}
	s.listenHost, s.tlsALPNPort = host, port
	if a.HTTPListen != "" {
		host, port, err := splitListen(a.HTTPListen)
		if err != nil {
			return s, fmt.Errorf("tls.acme.http_listen %q: %w", a.HTTPListen, err)
		}
		s.httpPort = port
		if s.listenHost == "" {
			s.listenHost = host
		}
	}
	if s.disableALPN && s.disableHTTP {
		return s, errors.New("tls.acme.http_listen: required when TLS-ALPN-01 is disabled (no challenge left to answer)")
	}
	return s, nil
}

func splitListen(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err = strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return host, port, nil
}

// defaultStorage is dohfwd's folder under the user's data directory
// ($XDG_DATA_HOME, else ~/.local/share).
func defaultStorage() string {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = "."
		}
		base = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(base, "dohfwd", "acme")
}

func (m *Manager) startACME(ctx context.Context, cfg Config) error {
	s, err := checkACME(cfg)
	if err != nil {
		return err
	}
	storage, shared, err := m.openStorage(s, cfg.ACME.Redis)
	if err != nil {
		return err
	}
	storageName := s.storage
	if shared != nil {
		storageName = shared.String()
		m.closers = append(m.closers, func() { _ = shared.Close() })
	}
	zl := zap.New(newZerologCore(m.log))

	a := &acmeState{domains: s.domains, ca: s.ca, ready: make(chan struct{})}
	a.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return a.magic, nil },
		RenewCheckInterval: s.renewCheck,
		Logger:             zl,
	})
	a.magic = certmagic.New(a.cache, certmagic.Config{
		Storage:            storage,
		RenewalWindowRatio: s.renewalRatio,
		DisableARI:         cfg.tuning.disableARI,
		// Clients that connect by IP send no SNI; give them the certificate.
		DefaultServerName:  s.domains[0],
		FallbackServerName: s.domains[0],
		Logger:             zl,
		OnEvent: func(_ context.Context, event string, data map[string]any) error {
			m.onACMEEvent(event, data)
			return nil
		},
		ShouldEmitFunc: wantedACMEEvent, // keeps per-handshake events off the hot path
	})
	a.issuer = certmagic.NewACMEIssuer(a.magic, certmagic.ACMEIssuer{
		CA:                      s.ca,
		Email:                   s.email,
		Agreed:                  true,
		TrustedRoots:            s.roots,
		ListenHost:              s.listenHost,
		AltHTTPPort:             s.httpPort,
		AltTLSALPNPort:          s.tlsALPNPort,
		DisableHTTPChallenge:    s.disableHTTP,
		DisableTLSALPNChallenge: s.disableALPN,
		Profile:                 s.profile,
		Logger:                  zl,
	})
	a.magic.Issuers = []certmagic.Issuer{a.issuer}

	if s.httpListen != "" {
		ln, err := net.Listen("tcp", s.httpListen)
		if err != nil {
			a.cache.Stop()
			return fmt.Errorf("tls.acme.http_listen: %w", err)
		}
		if wrap := cfg.ACME.WrapHTTPListener; wrap != nil {
			ln = wrap(ln)
		}
		a.http01 = &http.Server{
			Handler:           a.issuer.HTTPChallengeHandler(http.HandlerFunc(notACMEChallenge)),
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          nil,
		}
		m.goTracked(func() {
			if err := a.http01.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				m.log.Error().Err(err).Str("listen", s.httpListen).Msg("HTTP-01 challenge listener stopped")
			}
		})
	}

	m.acme = a
	m.log.Info().Strs("domains", a.domains).Str("ca", a.ca).Str("storage", storageName).
		Msg("waiting for a certificate from the ACME CA; HTTPS handshakes fail until it arrives")
	// ManageAsync loads the certificate from storage (another replica may
	// have it) or obtains one in the background, never prompting, retrying
	// with certmagic's backoff (1 min, 2 min, ... up to 30 days, which keeps
	// clear of the CA's failed-validation rate limits); its cache then
	// renews it. Readiness and failures come back through onACMEEvent.
	// certmagic gives up on a domain whose storage cannot be read at this
	// point, so with a shared store that does not answer yet, management
	// starts once it does.
	answers := shared == nil || m.storeAnswers(ctx, shared)
	if !answers {
		m.goTracked(func() {
			if m.waitForStore(ctx, shared) {
				if err := a.magic.ManageAsync(ctx, a.domains); err != nil {
					m.log.Error().Err(err).Msg("could not start certificate management")
				}
			}
		})
	} else if err := a.magic.ManageAsync(ctx, a.domains); err != nil {
		m.cancel()
		if a.http01 != nil {
			_ = a.http01.Close()
		}
		m.wg.Wait()
		a.cache.Stop()
		return fmt.Errorf("tls.acme: %w", err)
	}
	m.goTracked(func() { m.reportReady(ctx) })
	if shared != nil {
		m.goTracked(func() { m.watchStore(ctx, shared, answers) })
	}
	return nil
}

// wantedACMEEvent lists the certmagic events onACMEEvent handles.
func wantedACMEEvent(event string) bool {
	return event == "cached_managed_cert" || event == "cert_failed"
}

func (m *Manager) onACMEEvent(event string, data map[string]any) {
	a := m.acme
	switch event {
	case "cached_managed_cert":
		sans, _ := data["sans"].([]string)
		for _, san := range sans {
			if san == a.domains[0] {
				a.readyOnce.Do(func() { close(a.ready) })
			}
		}
	case "cert_failed":
		err, _ := data["error"].(error)
		if err == nil {
			err = fmt.Errorf("%v", data["error"])
		}
		a.setErr(err)
		renewal, _ := data["renewal"].(bool)
		id, _ := data["identifier"].(string)
		m.log.Error().Err(err).Str("identifier", id).Bool("renewal", renewal).Str("ca", a.ca).
			Msg("could not obtain a certificate; retrying with backoff")
	}
}

// reportReady logs once the first certificate is in the cache.
func (m *Manager) reportReady(ctx context.Context) {
	a := m.acme
	start := time.Now()
	select {
	case <-ctx.Done():
		return
	case <-a.ready:
	}
	ev := m.log.Info().Strs("domains", a.domains).Dur("took", time.Since(start))
	if leaf := a.currentLeaf(); leaf != nil {
		ev = ev.Str("fingerprint", fingerprint(leaf.Raw)).Str("serial", leaf.SerialNumber.Text(16)).
			Time("not_after", leaf.NotAfter)
	}
	ev.Msg("certificate ready")
}

func notACMEChallenge(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "dohfwd: this port only answers ACME HTTP-01 challenges; use HTTPS", http.StatusNotFound)
}

func (a *acmeState) setErr(err error) {
	a.mu.Lock()
	a.lastErr = err
	a.mu.Unlock()
}

func (a *acmeState) lastError() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastErr
}

// currentLeaf is the newest cached certificate for the first domain: the
// one handshakes get.
func (a *acmeState) currentLeaf() *x509.Certificate {
	var newest *x509.Certificate
	for _, c := range a.cache.AllMatchingCertificates(a.domains[0]) {
		if c.Leaf != nil && (newest == nil || c.Leaf.NotAfter.After(newest.NotAfter)) {
			newest = c.Leaf
		}
	}
	return newest
}
