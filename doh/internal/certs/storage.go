package certs

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/dohfwd/dohfwd/doh/internal/certs/redisstore"
)

// Environment variables that carry the shared store's credentials, so that
// they stay out of the configuration file (and its logs).
const (
	EnvRedisPassword = "DOHFWD_REDIS_PASSWORD"
	EnvRedisUsername = "DOHFWD_REDIS_USERNAME"
)

// RedisConfig tunes a redis:// or rediss:// storage (YAML tls.acme.redis.*).
type RedisConfig struct {
	// PasswordFile holds the password (one line); "" = $DOHFWD_REDIS_PASSWORD.
	PasswordFile string
	// CARoot is a PEM file of roots to trust for rediss:// ("" = the
	// system's).
	CARoot string
	// KeyPrefix starts every key; "" = "dohfwd".
	KeyPrefix string
	// LockLease is how long a lock outlives a replica that died holding it;
	// 0 = redisstore.DefaultLease (at most one minute).
	LockLease time.Duration
}

// IsRedisURL reports whether a tls.acme.storage value names Redis rather
// than a folder.
func IsRedisURL(storage string) bool {
	return strings.HasPrefix(storage, "redis://") || strings.HasPrefix(storage, "rediss://")
}

// redisOptions turns the storage URL and its settings into client options.
// Errors never repeat the URL: it could hold a password by mistake.
func redisOptions(storage string, rc RedisConfig) (*redis.Options, error) {
	u, err := url.Parse(storage)
	if err != nil || u.Host == "" {
		return nil, errors.New("tls.acme.storage: not a valid redis://host:port/db or rediss:// URL")
	}
	if _, has := u.User.Password(); has {
		return nil, fmt.Errorf("tls.acme.storage: a password in the URL is refused: put it in tls.acme.redis.password_file or $%s", EnvRedisPassword)
	}
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("tls.acme.storage %s: %w", u.Redacted(), err)
	}
	if opts.Username == "" {
		opts.Username = os.Getenv(EnvRedisUsername)
	}
	switch {
	case rc.PasswordFile != "":
		b, err := os.ReadFile(rc.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("tls.acme.redis.password_file: %w", err)
		}
		opts.Password = strings.TrimRight(string(b), "\r\n")
	default:
		opts.Password = os.Getenv(EnvRedisPassword)
	}
	if rc.CARoot != "" {
		if opts.TLSConfig == nil {
			return nil, errors.New("tls.acme.redis.ca_root: needs a rediss:// storage URL")
		}
		pemBytes, err := os.ReadFile(rc.CARoot)
		if err != nil {
			return nil, fmt.Errorf("tls.acme.redis.ca_root: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("tls.acme.redis.ca_root %q: no PEM certificate found", rc.CARoot)
		}
		opts.TLSConfig.RootCAs = pool
	}
	// Certificate storage is not on the question path: fail fast, and let
	// certmagic's retries and the health check below do the waiting.
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
	opts.MaxRetries = 1
	opts.DisableIdentity = true // CLIENT SETINFO is unknown to older servers
	return opts, nil
}

// openStorage returns certmagic's storage for s: a folder, or Redis.
func (m *Manager) openStorage(s acmeSettings, rc RedisConfig) (certmagic.Storage, *redisstore.Store, error) {
	if !IsRedisURL(s.storage) {
		return &certmagic.FileStorage{Path: s.storage}, nil, nil
	}
	opts, err := redisOptions(s.storage, rc)
	if err != nil {
		return nil, nil, err
	}
	st, err := redisstore.New(redisstore.Options{Redis: opts, Prefix: rc.KeyPrefix, Lease: rc.LockLease})
	if err != nil {
		return nil, nil, fmt.Errorf("tls.acme.redis.lock_lease: %w", err)
	}
	redis.SetLogger(redisLogger{m.log})
	st.OnLockLost = func(name string) {
		m.log.Warn().Str("lock", name).Str("storage", st.String()).
			Msg("certificate store lock lost: its lease ran out before it could be renewed")
	}
	return st, st, nil
}

// storeAnswers pings the shared store once.
func (m *Manager) storeAnswers(ctx context.Context, st *redisstore.Store) bool {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := st.Ping(pctx)
	if err != nil {
		m.log.Error().Err(err).Str("storage", st.String()).
			Msg("certificate store unreachable at start: the certificate is loaded or obtained once it answers")
	}
	return err == nil
}

// waitForStore pings the store until it answers (true) or ctx ends.
func (m *Manager) waitForStore(ctx context.Context, st *redisstore.Store) bool {
	every := storeCheckInterval(st)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(every):
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := st.Ping(pctx)
		cancel()
		if err == nil {
			m.log.Info().Str("storage", st.String()).Msg("certificate store reachable: starting certificate management")
			return true
		}
	}
}

func storeCheckInterval(st *redisstore.Store) time.Duration {
	return min(max(st.Lease()/2, 500*time.Millisecond), 10*time.Second)
}

// redisLogger puts go-redis's own messages (pool dial failures and the
// like, which name addresses but never credentials) into the log stream at
// debug level: the store's health is reported by watchStore.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Str("storage", "redis").Msg(fmt.Sprintf(format, v...))
}

// watchStore checks the shared store every half lease (at most every 10 s)
// and logs when it becomes unreachable and when it is back. While it is
// away the certificates already loaded keep being served; obtaining and
// renewing wait for it (certmagic retries with backoff).
func (m *Manager) watchStore(ctx context.Context, st *redisstore.Store, healthy bool) {
	every := storeCheckInterval(st)
	t := time.NewTicker(every)
	defer t.Stop()
	down := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := st.Ping(pctx)
		cancel()
		switch {
		case err != nil && healthy && ctx.Err() == nil:
			healthy, down = false, time.Now()
			m.log.Error().Err(err).Str("storage", st.String()).
				Msg("certificate store unreachable: serving the certificates already loaded; obtaining and renewing wait for it")
		case err == nil && !healthy:
			healthy = true
			m.log.Info().Str("storage", st.String()).Dur("down", time.Since(down)).
				Msg("certificate store reachable again")
		}
	}
}
