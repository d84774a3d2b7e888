package certs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// writePair writes c's certificate and key to certFile and keyFile.
func writePair(t *testing.T, certFile, keyFile string, certPEM, keyPEM []byte) {
	t.Helper()
	writeAtomically(t, keyFile, keyPEM)
	writeAtomically(t, certFile, certPEM)
}

func TestFilesReloadServesReplacedCertificateAndKeepsOldOnBrokenOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first, second, third := newTestCert(t, "doh.example"), newTestCert(t, "doh.example"), newTestCert(t, "doh.example")
	c1, k1 := pemPair(t, first)
	c2, k2 := pemPair(t, second)
	c3, k3 := pemPair(t, third)
	writePair(t, certFile, keyFile, c1, k1)

	log, logs := testLogger(t)
	cfg := Config{Mode: ModeFiles, CertFile: certFile, KeyFile: keyFile}
	cfg.tuning.filePoll = 20 * time.Millisecond
	m, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, m)
	addr := serveTLS(t, m)

	served := func() string {
		leaf, err := handshakeLeaf(t, addr, "doh.example", nil)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		return fingerprint(leaf.Raw)
	}
	fp1, fp2, fp3 := fingerprint(first.Leaf.Raw), fingerprint(second.Leaf.Raw), fingerprint(third.Leaf.Raw)
	if got := served(); got != fp1 {
		t.Fatalf("served %s at start, want the first certificate %s", got, fp1)
	}

	// A good replacement is served without restart.
	writePair(t, certFile, keyFile, c2, k2)
	eventually(t, 5*time.Second, "the replaced certificate to be served", func() bool { return served() == fp2 })
	if m.Fingerprint() != fp2 {
		t.Errorf("Fingerprint() = %s, want %s", m.Fingerprint(), fp2)
	}

	// A broken replacement (the third certificate with the second key) is
	// refused: the second stays and the reason is logged.
	writeAtomically(t, certFile, c3)
	eventually(t, 5*time.Second, "an error log about the broken pair", func() bool {
		return strings.Contains(logs.String(), "do not hold a valid pair")
	})
	if got := served(); got != fp2 {
		t.Fatalf("after a broken replacement served %s, want the previous certificate %s", got, fp2)
	}
	if !strings.Contains(logs.String(), `"level":"error"`) || !strings.Contains(logs.String(), "private key does not match public key") {
		t.Errorf("log lacks an error-level line with the reason:\n%s", logs)
	}

	// Garbage is refused too.
	writeAtomically(t, keyFile, []byte("-----BEGIN PRIVATE KEY-----\ngarbage\n-----END PRIVATE KEY-----\n"))
	time.Sleep(100 * time.Millisecond) // several polls
	if got := served(); got != fp2 {
		t.Fatalf("after a garbage key served %s, want the previous certificate %s", got, fp2)
	}

	// The matching key arrives later: the third certificate is taken.
	writeAtomically(t, keyFile, k3)
	eventually(t, 5*time.Second, "the repaired pair to be served", func() bool { return served() == fp3 })
}

// TestFilesWatcherPollsAboutEverySecond checks the production poll period
// with a fake clock: a change is picked up within about a second, and a
// removed file keeps the old certificate.
func TestFilesWatcherPollsAboutEverySecond(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first, second := newTestCert(t, "a.example"), newTestCert(t, "b.example")
	c1, k1 := pemPair(t, first)
	c2, k2 := pemPair(t, second)
	writePair(t, certFile, keyFile, c1, k1)

	synctest.Test(t, func(t *testing.T) {
		log, logs := testLogger(t)
		m, err := New(context.Background(), Config{Mode: ModeFiles, CertFile: certFile, KeyFile: keyFile}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		fp1, fp2 := fingerprint(first.Leaf.Raw), fingerprint(second.Leaf.Raw)

		writePair(t, certFile, keyFile, c2, k2)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if m.Fingerprint() != fp1 {
			t.Fatalf("reloaded before the first poll")
		}
		time.Sleep(600 * time.Millisecond)
		synctest.Wait()
		if m.Fingerprint() != fp2 {
			t.Fatalf("Fingerprint() = %s one poll after the change, want %s", m.Fingerprint(), fp2)
		}

		if err := os.Remove(certFile); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if m.Fingerprint() != fp2 {
			t.Fatalf("a removed file replaced the certificate")
		}
		if n := strings.Count(logs.String(), "cannot read certificate files"); n != 1 {
			t.Errorf("logged a missing file %d times over 3 polls, want once", n)
		}
	})
}
