package certs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/certs/redisstore"
	"github.com/dohfwd/dohfwd/certs/redisstore/redistest"
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
