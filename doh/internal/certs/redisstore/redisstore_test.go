package redisstore

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dohfwd/dohfwd/doh/internal/certs/redisstore/redistest"
)

func newStore(t *testing.T, srv *redistest.Server, lease time.Duration) *Store {
	t.Helper()
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Redis: opts, Lease: lease, Prefix: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStoreLoadStatListDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, redistest.Start(t), 0)
	keys := map[string]string{
		"certificates/ca/doh.test/doh.test.crt":  "CERT",
		"certificates/ca/doh.test/doh.test.key":  "KEY",
		"certificates/ca/doh.test/doh.test.json": "{}",
		"acme/ca/users/ops/ops.json":             "USER",
		"ocsp/doh.test":                          "",
	}
	before := time.Now().Add(-time.Second)
	for k, v := range keys {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range keys {
		got, err := s.Load(ctx, k)
		if err != nil || string(got) != v {
			t.Errorf("Load(%q) = %q, %v; want %q", k, got, err, v)
		}
	}
	if _, err := s.Load(ctx, "certificates/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing key: %v, want fs.ErrNotExist", err)
	}

	ki, err := s.Stat(ctx, "certificates/ca/doh.test/doh.test.key")
	if err != nil || !ki.IsTerminal || ki.Size != 3 || ki.Modified.Before(before) {
		t.Errorf("Stat of a value: %+v, %v", ki, err)
	}
	if ki, err := s.Stat(ctx, "certificates/ca"); err != nil || ki.IsTerminal {
		t.Errorf("Stat of a directory: %+v, %v", ki, err)
	}
	if _, err := s.Stat(ctx, "certificates/c"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of a key prefix that is no directory: %v, want fs.ErrNotExist", err)
	}
	for k, want := range map[string]bool{"certificates": true, "certificates/ca/doh.test/doh.test.crt": true,
		"certificates/c": false, "acme/ca/users/ops/ops.json/x": false, "ocsp/doh.test": true} {
		if got := s.Exists(ctx, k); got != want {
			t.Errorf("Exists(%q) = %v, want %v", k, got, want)
		}
	}

	list := func(dir string, recursive bool) []string {
		t.Helper()
		got, err := s.List(ctx, dir, recursive)
		if err != nil {
			t.Fatalf("List(%q, %v): %v", dir, recursive, err)
		}
		slices.Sort(got)
		return got
	}
	if got, want := list("certificates", false), []string{"certificates/ca"}; !slices.Equal(got, want) {
		t.Errorf("List(certificates) = %q, want %q", got, want)
	}
	if got, want := list("", false), []string{"acme", "certificates", "ocsp"}; !slices.Equal(got, want) {
		t.Errorf("List(\"\") = %q, want %q", got, want)
	}
	want := []string{"certificates/ca", "certificates/ca/doh.test", "certificates/ca/doh.test/doh.test.crt",
		"certificates/ca/doh.test/doh.test.json", "certificates/ca/doh.test/doh.test.key"}
	if got := list("certificates/", true); !slices.Equal(got, want) {
		t.Errorf("List(certificates/, recursive) = %q, want %q", got, want)
	}
	if _, err := s.List(ctx, "nothing", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List of a missing directory: %v, want fs.ErrNotExist", err)
	}

	// Deleting a directory deletes what is below it and nothing else.
	if err := s.Delete(ctx, "certificates/ca"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates") || s.Exists(ctx, "certificates/ca/doh.test/doh.test.crt") {
		t.Error("keys below a deleted directory remain")
	}
	if !s.Exists(ctx, "acme/ca/users/ops/ops.json") {
		t.Error("Delete removed a key outside the directory")
	}
	if err := s.Delete(ctx, "certificates/ca"); err != nil {
		t.Errorf("deleting again: %v, want nil", err)
	}
	if err := s.Store(ctx, "ocsp/doh.test", []byte("NEW")); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Load(ctx, "ocsp/doh.test"); string(got) != "NEW" {
		t.Errorf("overwritten value = %q", got)
	}
}

func TestStoresSharingRedisSeeEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	a, b := newStore(t, srv, 0), newStore(t, srv, 0)
	if err := a.Store(ctx, "k/v", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Load(ctx, "k/v"); err != nil || string(got) != "x" {
		t.Errorf("the other store loads %q, %v", got, err)
	}
}

func TestLockIsExclusiveAndRenewedWhileHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	lease := time.Second
	a, b := newStore(t, srv, lease), newStore(t, srv, lease)
	if err := a.Lock(ctx, "issue_cert_doh.test"); err != nil {
		t.Fatal(err)
	}
	// Held for three leases: the holder keeps renewing it.
	deadline := time.Now().Add(3 * lease)
	for time.Now().Before(deadline) {
		if ok, err := b.TryLock(ctx, "issue_cert_doh.test"); ok || err != nil {
			t.Fatalf("another store took a lock still held and renewed (ok %v, err %v)", ok, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := a.Unlock(ctx, "issue_cert_doh.test"); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, lease/2)
	defer cancel()
	if err := b.Lock(waitCtx, "issue_cert_doh.test"); err != nil {
		t.Fatalf("lock not free right after Unlock: %v", err)
	}
	if err := b.Unlock(ctx, "issue_cert_doh.test"); err != nil {
		t.Fatal(err)
	}
}

func TestLockOfADeadHolderExpiresAfterTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	lease := 2 * time.Second
	s := newStore(t, srv, lease)
	// A holder that died: its lock, with the lease it last renewed, and
	// nobody renewing it.
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	if err := raw.Set(ctx, "test:lock:issue_cert_doh.test", "dead/1/x", lease).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, 2*lease)
	defer cancel()
	if err := s.Lock(waitCtx, "issue_cert_doh.test"); err != nil {
		t.Fatalf("lock of a dead holder not taken within two leases: %v", err)
	}
	if took := time.Since(start); took < lease-300*time.Millisecond {
		t.Errorf("lock taken after %v, before the dead holder's lease of %v ran out", took, lease)
	}
	if err := s.Unlock(ctx, "issue_cert_doh.test"); err != nil {
		t.Fatal(err)
	}
}

func TestUnlockLeavesALockTakenOverAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	s := newStore(t, srv, time.Second)
	lost := make(chan string, 1)
	s.OnLockLost = func(name string) { lost <- name }
	if err := s.Lock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	// Another replica took it over (as after a lease ran out during a
	// Redis failover).
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	raw.Set(ctx, "test:lock:l", "other/2/y", time.Minute)
	select {
	case name := <-lost:
		if name != "l" {
			t.Errorf("lost %q", name)
		}
	case <-time.After(2 * time.Second):
		t.Error("the holder did not notice its lock was taken over")
	}
	if err := s.Unlock(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if v := raw.Get(ctx, "test:lock:l").Val(); v != "other/2/y" {
		t.Errorf("Unlock removed another holder's lock (now %q)", v)
	}
}

func TestLeaseBounds(t *testing.T) {
	for _, lease := range []time.Duration{MinLease - 1, MaxLease + 1} {
		if _, err := New(Options{Redis: &redis.Options{Addr: "127.0.0.1:1"}, Lease: lease}); err == nil {
			t.Errorf("lease %v accepted", lease)
		}
	}
}

func TestErrorsWhileRedisIsDownAndRecovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	s := newStore(t, srv, time.Second)
	if err := s.Store(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.Ping(short); err == nil {
		t.Fatal("Ping succeeded with Redis stopped")
	}
	if _, err := s.Load(short, "k"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load with Redis stopped: %v, want a connection error (not ErrNotExist)", err)
	}
	if err := s.Lock(short, "l"); err == nil {
		t.Error("Lock succeeded with Redis stopped")
	}
	srv.Resume()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after Redis returned: %v", err)
	}
	if got, err := s.Load(ctx, "k"); err != nil || string(got) != "v" {
		t.Errorf("Load after Redis returned: %q, %v", got, err)
	}
}
