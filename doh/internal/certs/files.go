package certs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"os"
	"time"
)

func (m *Manager) startFiles(ctx context.Context, cfg Config) error {
	if cfg.CertFile == "" {
		return fmt.Errorf("tls.cert_file: required when tls.mode is %q", ModeFiles)
	}
	if cfg.KeyFile == "" {
		return fmt.Errorf("tls.key_file: required when tls.mode is %q", ModeFiles)
	}
	w := &fileWatcher{certFile: cfg.CertFile, keyFile: cfg.KeyFile}
	certPEM, keyPEM, err := w.read()
	if err != nil {
		return err
	}
	cert, err := w.parse(certPEM, keyPEM)
	if err != nil {
		return err
	}
	w.seen = contentDigest(certPEM, keyPEM)
	served := newServedCert(cert)
	m.current.Store(served)
	m.log.Info().Str("cert_file", cfg.CertFile).Str("key_file", cfg.KeyFile).
		Str("fingerprint", served.fingerprint).Time("not_after", cert.Leaf.NotAfter).
		Msg("certificate loaded from files; watching them for changes")
	warnIfExpired(m, cert)

	poll := cfg.tuning.filePoll
	if poll <= 0 {
		poll = defaultFilePoll
	}
	m.goTracked(func() { m.watchFiles(ctx, w, poll) })
	return nil
}

// fileWatcher remembers what the certificate files held when last looked at.
type fileWatcher struct {
	certFile, keyFile string
	seen              [sha256.Size]byte // digest of the last contents seen, good or bad
	seenErr           string            // last read error, so it is logged once
}

func (w *fileWatcher) read() (certPEM, keyPEM []byte, err error) {
	certPEM, err = os.ReadFile(w.certFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tls.cert_file: %w", err)
	}
	keyPEM, err = os.ReadFile(w.keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tls.key_file: %w", err)
	}
	return certPEM, keyPEM, nil
}

func (w *fileWatcher) parse(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.cert_file %q, tls.key_file %q: %w", w.certFile, w.keyFile, err)
	}
	return &cert, nil // Go 1.23+ fills cert.Leaf
}

// contentDigest identifies a cert/key pair by content, not mtime, so a
// replacement within the same second (or with a preserved mtime) is seen.
func contentDigest(certPEM, keyPEM []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(certPEM)
	h.Write([]byte{0})
	h.Write(keyPEM)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// watchFiles polls the files (fsnotify is not a dependency, and polling
// also survives the symlink swaps of Kubernetes secrets and certbot) and
// swaps in a new pair once it parses. A broken pair keeps the old one.
func (m *Manager) watchFiles(ctx context.Context, w *fileWatcher, poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.checkFiles(w)
	}
}

func (m *Manager) checkFiles(w *fileWatcher) {
	certPEM, keyPEM, err := w.read()
	if err != nil {
		if err.Error() != w.seenErr {
			w.seenErr = err.Error()
			m.log.Error().Err(err).Str("fingerprint", m.current.Load().fingerprint).
				Msg("cannot read certificate files; keeping the current certificate")
		}
		return
	}
	w.seenErr = ""
	d := contentDigest(certPEM, keyPEM)
	if bytes.Equal(d[:], w.seen[:]) {
		return
	}
	w.seen = d
	cert, err := w.parse(certPEM, keyPEM)
	if err != nil {
		m.log.Error().Err(err).Str("fingerprint", m.current.Load().fingerprint).
			Msg("certificate files changed but do not hold a valid pair; keeping the current certificate")
		return
	}
	served := newServedCert(cert)
	old := m.current.Swap(served)
	m.log.Info().Str("fingerprint", served.fingerprint).Str("previous_fingerprint", old.fingerprint).
		Time("not_after", cert.Leaf.NotAfter).Msg("certificate reloaded from files")
	warnIfExpired(m, cert)
}

func warnIfExpired(m *Manager, cert *tls.Certificate) {
	now := time.Now()
	if now.After(cert.Leaf.NotAfter) || now.Before(cert.Leaf.NotBefore) {
		m.log.Warn().Time("not_before", cert.Leaf.NotBefore).Time("not_after", cert.Leaf.NotAfter).
			Msg("certificate from files is not valid at this time; clients will reject it")
	}
}
