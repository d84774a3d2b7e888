// Package redisstore keeps certmagic's storage in Redis (or Valkey, or a
// managed Redis), so that the replicas of a fleet share one set of ACME
// certificates, keys and account: one replica obtains or renews a
// certificate, and the others load it instead of ordering their own.
//
// Values live in one hash per key; a sorted set indexes every key, so that
// "directories" (key prefixes ending in /) can be listed and deleted.
// Locks are keys set with NX and a lease: the holder renews the lease while
// it lives, so a replica that dies holding a lock blocks the others for at
// most one lease. It is built on github.com/redis/go-redis/v9, Redis's own
// Go client: certificate storage is a handful of requests a day, so
// rueidis's pipelining and client-side caching buy nothing here, while
// go-redis's redis:// URL parsing, TLS and plain request/response API fit.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
)

// Lease bounds.
const (
	DefaultLease = 30 * time.Second
	MinLease     = time.Second
	MaxLease     = time.Minute
)

// Store is a certmagic.Storage in Redis.
type Store struct {
	client *redis.Client
	prefix string // key prefix, e.g. "dohfwd"
	lease  time.Duration
	owner  string // this process, written into its lock tokens

	// OnLockLost, when set, is told when a held lock was taken over
	// because its lease could not be renewed in time.
	OnLockLost func(name string)

	mu    sync.Mutex
	held  map[string]*heldLock // lock name -> held lock
	close sync.Once
}

// heldLock is a lock this process holds, with the goroutine renewing it.
type heldLock struct {
	token string
	stop  chan struct{}
	done  chan struct{}
}

// Options configure New.
type Options struct {
	// Redis is the connection's options (redis.ParseURL makes them).
	Redis *redis.Options
	// Prefix starts every key; "" = "dohfwd".
	Prefix string
	// Lease is how long a lock outlives a holder that stopped renewing it;
	// 0 = DefaultLease. It must be within MinLease..MaxLease.
	Lease time.Duration
}

// New returns a Store. It does not connect: the first request does.
func New(o Options) (*Store, error) {
	lease := o.Lease
	if lease == 0 {
		lease = DefaultLease
	}
	if lease < MinLease || lease > MaxLease {
		return nil, fmt.Errorf("lock lease %v: want %v to %v", lease, MinLease, MaxLease)
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = "dohfwd"
	}
	host, _ := os.Hostname()
	return &Store{
		client: redis.NewClient(o.Redis),
		prefix: prefix,
		lease:  lease,
		owner:  host + "/" + strconv.Itoa(os.Getpid()),
		held:   map[string]*heldLock{},
	}, nil
}

// Lease is how long a lock outlives its holder.
func (s *Store) Lease() time.Duration { return s.lease }

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.client.Ping(ctx).Err()
}

// Close releases the locks still held and closes the connections.
func (s *Store) Close() error {
	var err error
	s.close.Do(func() {
		s.mu.Lock()
		names := make([]string, 0, len(s.held))
		for name := range s.held {
			names = append(names, name)
		}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, name := range names {
			_ = s.Unlock(ctx, name)
		}
		err = s.client.Close()
	})
	return err
}

func (s *Store) dataKey(key string) string { return s.prefix + ":data:" + key }
func (s *Store) indexKey() string          { return s.prefix + ":index" }
func (s *Store) lockKey(name string) string {
	return s.prefix + ":lock:" + name
}

// Fields of a value's hash.
const (
	fieldValue    = "v"
	fieldModified = "m" // Unix milliseconds
)

// Store puts value at key.
func (s *Store) Store(ctx context.Context, key string, value []byte) error {
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.dataKey(key), fieldValue, value, fieldModified, time.Now().UnixMilli())
		p.ZAdd(ctx, s.indexKey(), redis.Z{Member: key})
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: store %q: %w", key, err)
	}
	return nil
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (s *Store) Load(ctx context.Context, key string) ([]byte, error) {
	v, err := s.client.HGet(ctx, s.dataKey(key), fieldValue).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redis: load %q: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("redis: load %q: %w", key, err)
	}
	return v, nil
}

// under returns the keys below the directory dir, in order.
func (s *Store) under(ctx context.Context, dir string) ([]string, error) {
	by := &redis.ZRangeBy{Min: "-", Max: "+"}
	if dir != "" {
		p := strings.TrimSuffix(dir, "/") + "/"
		// Every UTF-8 key starting with p sorts below p followed by 0xff.
		by = &redis.ZRangeBy{Min: "[" + p, Max: "(" + p + "\xff"}
	}
	return s.client.ZRangeByLex(ctx, s.indexKey(), by).Result()
}

// Delete removes key and, when key is a directory, every key below it.
func (s *Store) Delete(ctx context.Context, key string) error {
	keys, err := s.under(ctx, key)
	if err != nil {
		return fmt.Errorf("redis: delete %q: %w", key, err)
	}
	keys = append(keys, key)
	_, err = s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Del(ctx, s.dataKey(k))
			p.ZRem(ctx, s.indexKey(), k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: delete %q: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a value or a directory.
func (s *Store) Exists(ctx context.Context, key string) bool {
	if n, err := s.client.Exists(ctx, s.dataKey(key)).Result(); err == nil && n == 1 {
		return true
	}
	return s.isDir(ctx, key)
}

func (s *Store) isDir(ctx context.Context, key string) bool {
	p := strings.TrimSuffix(key, "/") + "/"
	keys, err := s.client.ZRangeByLex(ctx, s.indexKey(),
		&redis.ZRangeBy{Min: "[" + p, Max: "(" + p + "\xff", Count: 1}).Result()
	return err == nil && len(keys) > 0
}

// List returns the keys in dir: its direct children (values and
// directories), or with recursive every key and directory below it, as
// certmagic's FileStorage does.
func (s *Store) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	keys, err := s.under(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("redis: list %q: %w", dir, err)
	}
	base := strings.TrimSuffix(dir, "/")
	if base != "" {
		base += "/"
	}
	seen := map[string]bool{}
	var out []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, k := range keys {
		rel := strings.TrimPrefix(k, base)
		if !recursive {
			first, _, _ := strings.Cut(rel, "/")
			add(base + first)
			continue
		}
		parts := strings.Split(rel, "/")
		for i := 1; i < len(parts); i++ {
			add(base + strings.Join(parts[:i], "/"))
		}
		add(k)
	}
	if len(out) == 0 && !s.Exists(ctx, dir) {
		return nil, fmt.Errorf("redis: list %q: %w", dir, fs.ErrNotExist)
	}
	return out, nil
}

// Stat describes key.
func (s *Store) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	var modified *redis.StringCmd
	var size *redis.IntCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		modified = p.HGet(ctx, s.dataKey(key), fieldModified)
		size = p.HStrLen(ctx, s.dataKey(key), fieldValue)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return certmagic.KeyInfo{}, fmt.Errorf("redis: stat %q: %w", key, err)
	}
	if ms, err := modified.Int64(); err == nil {
		return certmagic.KeyInfo{Key: key, Modified: time.UnixMilli(ms), Size: size.Val(), IsTerminal: true}, nil
	}
	if s.isDir(ctx, key) {
		return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
	}
	return certmagic.KeyInfo{}, fmt.Errorf("redis: stat %q: %w", key, fs.ErrNotExist)
}

// Scripts that touch a lock only while it still holds our token.
var (
	renewScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end
return 0`)
	unlockScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1]) end
return 0`)
)

// pollInterval is how often a waiting Lock tries again.
func (s *Store) pollInterval() time.Duration {
	return min(s.lease/4, time.Second)
}

// Lock takes the named lock, waiting while another holder has it. The
// lock's lease is renewed every third of a lease until Unlock; if this
// process dies, the lock expires one lease after its last renewal.
func (s *Store) Lock(ctx context.Context, name string) error {
	for {
		ok, err := s.TryLock(ctx, name)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis: lock %q: %w", name, ctx.Err())
		case <-time.After(s.pollInterval()):
		}
	}
}

// TryLock takes the named lock if it is free.
func (s *Store) TryLock(ctx context.Context, name string) (bool, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	token := s.owner + "/" + hex.EncodeToString(b[:])
	ok, err := s.client.SetNX(ctx, s.lockKey(name), token, s.lease).Result()
	if err != nil {
		return false, fmt.Errorf("redis: lock %q: %w", name, err)
	}
	if !ok {
		return false, nil
	}
	h := &heldLock{token: token, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	s.held[name] = h
	s.mu.Unlock()
	go s.keep(name, h)
	return true, nil
}

// keep renews h's lease until it is unlocked, or lost.
func (s *Store) keep(name string, h *heldLock) {
	defer close(h.done)
	t := time.NewTicker(s.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.lease/3)
		n, err := renewScript.Run(ctx, s.client, []string{s.lockKey(name)}, h.token, s.lease.Milliseconds()).Int()
		cancel()
		if err == nil && n == 0 {
			// Another replica holds it now: our lease ran out unrenewed.
			if s.OnLockLost != nil {
				s.OnLockLost(name)
			}
			return
		}
		// On an error Redis is away; try again at the next tick, while
		// the lease may still be ours.
	}
}

// Unlock releases the named lock if this process still holds it.
func (s *Store) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("redis: unlock %q: not held", name)
	}
	close(h.stop)
	<-h.done
	if err := unlockScript.Run(ctx, s.client, []string{s.lockKey(name)}, h.token).Err(); err != nil {
		return fmt.Errorf("redis: unlock %q: %w", name, err)
	}
	return nil
}

// String names the store for certmagic's logs and its storage
// comparisons; it carries no credentials.
func (s *Store) String() string {
	return "redis " + s.client.Options().Addr + "/" + strconv.Itoa(s.client.Options().DB) + " " + s.prefix
}

var (
	_ certmagic.Storage   = (*Store)(nil)
	_ certmagic.TryLocker = (*Store)(nil)
)
