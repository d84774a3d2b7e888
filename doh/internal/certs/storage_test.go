package certs

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/doh/internal/certs/redisstore"
	"github.com/dohfwd/dohfwd/doh/internal/certs/redisstore/redistest"
	"github.com/dohfwd/dohfwd/doh/internal/proxied"
)

const redisTestPassword = "correct-horse-battery-staple-7f3a"

// A certificate obtained through a rediss:// store with a password from a
// file: TLS verified against a private CA, and the password in no log line.
func TestACMEOnRedisOverTLSWithPasswordFile(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{Password: redisTestPassword, TLS: true})
	ln, tlsPort := listenLoopback(t)
	ca := startPebble(t, tlsPort)
	const domain = "rediss.doh.test"
	pwFile := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pwFile, []byte(redisTestPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log, logs := testLogger(t)
	cfg := ca.acmeConfig(t, domain, srv.URL())
	cfg.ACME.Redis = RedisConfig{PasswordFile: pwFile, CARoot: srv.CAFile, LockLease: 2 * time.Second}
	cfg.ACME.TLSALPNListen = ln.Addr().String()
	m, addr := startManager(t, cfg, log, ln)
	roots, _ := ca.issuingRoots(t)
	if _, leaf := dohGet(t, addr, domain, "www.example.", roots); fingerprint(leaf.Raw) != m.Fingerprint() {
		t.Error("served certificate is not the one reported")
	}
	if strings.Contains(logs.String(), redisTestPassword) {
		t.Error("the Redis password appears in the log")
	}
	if !strings.Contains(logs.String(), `"storage":"redis 127.0.0.1:`) {
		t.Errorf("the log does not name the Redis store:\n%s", linesWith(logs.String(), "storage"))
	}
}

// The password comes from $DOHFWD_REDIS_PASSWORD when no file is set; a
// wrong one fails with an error that does not repeat it.
func TestRedisPasswordFromEnvironment(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Options{Password: redisTestPassword})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	open := func() error {
		opts, err := redisOptions(srv.URL(), RedisConfig{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := redisstore.New(redisstore.Options{Redis: opts})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		return st.Ping(ctx)
	}
	t.Setenv(EnvRedisPassword, redisTestPassword)
	if err := open(); err != nil {
		t.Errorf("with %s set: %v", EnvRedisPassword, err)
	}
	t.Setenv(EnvRedisPassword, "wrong-"+redisTestPassword)
	err := open()
	if err == nil {
		t.Fatal("a wrong password was accepted")
	}
	if strings.Contains(err.Error(), redisTestPassword) {
		t.Errorf("the error repeats the password: %v", err)
	}
}

func TestRedisURLWithPasswordIsRefusedWithoutRepeatingIt(t *testing.T) {
	for _, u := range []string{"redis://:" + redisTestPassword + "@127.0.0.1:6379/0",
		"redis://ops:" + redisTestPassword + "@127.0.0.1:bad/0"} {
		_, err := redisOptions(u, RedisConfig{})
		if err == nil {
			t.Errorf("%s accepted", u)
			continue
		}
		if strings.Contains(err.Error(), redisTestPassword) {
			t.Errorf("the error repeats the password: %v", err)
		}
	}
}

// The HTTP-01 listener goes through the same PROXY protocol wrapper as the
// DoH listeners when one is given: behind a balancer that sends headers on
// port 80 too, challenges still reach it.
func TestHTTP01ListenerTakesTheListenerWrapper(t *testing.T) {
	t.Parallel()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	log, _ := testLogger(t)
	// certmagic's background obtain may still write here after Close.
	storage, err := os.MkdirTemp("", "dohfwd-wrapped-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(storage) }) // best effort
	cfg := Config{Mode: ModeACME, ACME: ACMEConfig{
		Domains: []string{"wrapped.doh.test"}, CA: "https://127.0.0.1:1/dir", Storage: storage,
		HTTPListen: httpAddr, TLSALPNListen: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		WrapHTTPListener: func(ln net.Listener) net.Listener {
			return proxied.Listen(ln, proxied.Options{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		},
	}}
	m, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	mustClose(t, m)
	get := func(header string) (string, error) {
		c, err := net.DialTimeout("tcp", httpAddr, 2*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "%sGET /.well-known/acme-challenge/x HTTP/1.1\r\nHost: wrapped.doh.test\r\n\r\n", header)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		return resp.Status, nil
	}
	if status, err := get("PROXY TCP4 198.51.100.7 127.0.0.1 4000 80\r\n"); err != nil || !strings.HasPrefix(status, "404") {
		t.Errorf("with a PROXY header: %q, %v; want the challenge handler's 404", status, err)
	}
	if status, err := get(""); err == nil {
		t.Errorf("without the header the balancer must send: served (%s)", status)
	}
}
