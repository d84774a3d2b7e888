package config

import (
	"encoding/pem"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// validate checks the values the decoder cannot: addresses, names, enums
// and ranges. Every error names its key.
func (c *Config) validate(x *keyIndex) error {
	var es errs
	bad := func(path, format string, a ...any) { es.add(x.errorAt(c.Source, path, fmt.Sprintf(format, a...))) }

	for _, l := range []struct{ key, addr string }{
		{"listen.https", c.Listen.HTTPS}, {"listen.http", c.Listen.HTTP}, {"listen.dot", c.Listen.DoT}, {"listen.doq", c.Listen.DoQ},
		{"listen.dns", c.Listen.DNS},
		{"listen.admin", c.Listen.Admin}, {"tls.acme.http_listen", c.TLS.ACME.HTTPListen},
	} {
		if err := checkListenAddr(l.addr); err != nil {
			bad(l.key, "%v", err)
		}
	}
	if c.Listen.HTTPS == "" && c.Listen.HTTP == "" {
		bad("listen", "no DoH listener: set listen.https or listen.http")
	}
	if !strings.HasPrefix(c.Listen.Path, "/") {
		bad("listen.path", "%q must start with /", c.Listen.Path)
	}
	for i, p := range c.Listen.TrustedProxies {
		if _, err := ParsePrefix(p); err != nil {
			bad(fmt.Sprintf("listen.trusted_proxies[%d]", i), "%v", err)
		}
	}
	for i, p := range c.Listen.ProxyProtocol {
		if _, err := ParsePrefix(p); err != nil {
			bad(fmt.Sprintf("listen.proxy_protocol[%d]", i), "%v", err)
		}
	}

	switch c.TLS.Mode {
	case "self-signed":
	case "files":
		if c.TLS.CertFile == "" {
			bad("tls.cert_file", "required with tls.mode files")
		}
		if c.TLS.KeyFile == "" {
			bad("tls.key_file", "required with tls.mode files")
		}
	case "acme":
		if len(c.TLS.ACME.Domains) == 0 {
			bad("tls.acme.domains", "required with tls.mode acme")
		}
		for i, d := range c.TLS.ACME.Domains {
			if _, ok := dnswire.IsDomainName(d); !ok || d == "" {
				bad(fmt.Sprintf("tls.acme.domains[%d]", i), "%q is not a domain name", d)
			}
		}
		checkStorage(c.TLS.ACME, bad)
		if c.TLS.ACME.DisableTLSALPN && c.TLS.ACME.HTTPListen == "" {
			bad("tls.acme.disable_tls_alpn", "leaves no challenge: set tls.acme.http_listen for HTTP-01")
		}
	default:
		bad("tls.mode", "%q: want self-signed, files or acme", c.TLS.Mode)
	}

	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "%v: must be more than 0", d)
		}
	}
	notNegative := func(key string, d time.Duration) {
		if d < 0 {
			bad(key, "%v: must not be negative", d)
		}
	}
	positive("engine.transaction_timeout", c.Engine.TransactionTimeout)
	positive("engine.demotion_period", c.Engine.DemotionPeriod)
	notNegative("engine.question_timeout", c.Engine.QuestionTimeout)
	if c.Engine.Attempts < 1 {
		bad("engine.attempts", "%d: must be at least 1", c.Engine.Attempts)
	}
	if c.Engine.InFlightCeiling < 1 {
		bad("engine.in_flight_ceiling", "%d: must be at least 1", c.Engine.InFlightCeiling)
	}

	names := map[string]bool{}
	for i := range c.Scopes {
		s := &c.Scopes[i]
		key := fmt.Sprintf("scopes[%d]", i)
		if s.Name == "" {
			s.Name = "scope" + strconv.Itoa(i+1)
		}
		if names[s.Name] {
			bad(key+".name", "%q: another scope has this name", s.Name)
		}
		if s.Name == engine.FallbackScope {
			bad(key+".name", "%q is the name of the fallback servers' scope", s.Name)
		}
		names[s.Name] = true
		checkNames(key+".domains", s.Domains, engine.ParseDomain, bad)
		checkNames(key+".search", s.Search, engine.ParseSearchDomain, bad)
		checkServers(key+".servers", s.Servers, bad)
		if _, ok := ecsPolicies[s.ECS]; !ok {
			bad(key+".ecs", "%q: want strip, pass or add", s.ECS)
		}
		if s.IPv4Prefix < 0 || s.IPv4Prefix > 32 {
			bad(key+".ipv4_prefix", "%d: want 1 to 32", s.IPv4Prefix)
		}
		if s.IPv6Prefix < 0 || s.IPv6Prefix > 128 {
			bad(key+".ipv6_prefix", "%d: want 1 to 128", s.IPv6Prefix)
		}
		if (s.IPv4Prefix != 0 || s.IPv6Prefix != 0) && s.ECS != "add" {
			bad(key+".ecs", "ipv4_prefix and ipv6_prefix are for ecs: add")
		}
		for j, a := range s.SourcesV4 {
			if _, err := engine.ParseSource(a, 4); err != nil {
				bad(fmt.Sprintf("%s.sources_v4[%d]", key, j), "%v", err)
			}
		}
		for j, a := range s.SourcesV6 {
			if _, err := engine.ParseSource(a, 6); err != nil {
				bad(fmt.Sprintf("%s.sources_v6[%d]", key, j), "%v", err)
			}
		}
	}
	checkServers("fallback_servers", c.FallbackServers, bad)
	checkUpstreamTLS(c.UpstreamTLS, bad)
	for name, addrs := range c.Hosts {
		key := "hosts." + name
		if _, err := engine.ParseHostName(name); err != nil {
			bad(key, "%q is not a domain name", name)
		}
		for j, a := range addrs {
			if _, err := engine.ParseHostAddress(name, a); err != nil {
				bad(fmt.Sprintf("%s[%d]", key, j), "%v", err)
			}
		}
	}

	if c.Cache.MaxEntries < 0 {
		bad("cache.max_entries", "%d: must not be negative", c.Cache.MaxEntries)
	}
	notNegative("cache.min_ttl", c.Cache.MinTTL)
	notNegative("cache.max_ttl", c.Cache.MaxTTL)
	notNegative("cache.negative_max_ttl", c.Cache.NegativeMaxTTL)
	if c.Cache.MaxTTL > 0 && c.Cache.MinTTL > c.Cache.MaxTTL {
		bad("cache.min_ttl", "%v is more than cache.max_ttl %v", c.Cache.MinTTL, c.Cache.MaxTTL)
	}
	notNegative("cache.stale_max", c.Cache.StaleMax)
	notNegative("cache.stale_answer_after", c.Cache.StaleAnswerAfter)
	// A TTL is whole seconds: a stale TTL below one second would be 0,
	// an answer no one may keep.
	if c.Cache.StaleTTL < time.Second {
		bad("cache.stale_ttl", "%v: must be at least 1s", c.Cache.StaleTTL)
	}
	if c.Cache.PrefetchMinHits < 0 {
		bad("cache.prefetch_min_hits", "%d: must not be negative", c.Cache.PrefetchMinHits)
	}

	if c.Limits.ClientQPS < 0 || math.IsNaN(c.Limits.ClientQPS) || math.IsInf(c.Limits.ClientQPS, 0) {
		bad("limits.client_qps", "%v: must be a number, not negative", c.Limits.ClientQPS)
	}
	for _, l := range []struct {
		key string
		n   int
	}{
		{"limits.client_burst", c.Limits.ClientBurst}, {"limits.client_in_flight", c.Limits.ClientInFlight},
		{"limits.client_connections", c.Limits.ClientConnections}, {"limits.connections", c.Limits.Connections},
	} {
		if l.n < 0 {
			bad(l.key, "%d: must not be negative", l.n)
		}
	}
	if c.Limits.ClientBurst > 0 && c.Limits.ClientQPS == 0 {
		bad("limits.client_burst", "%d: needs limits.client_qps", c.Limits.ClientBurst)
	}
	if p := c.Limits.PrefixV4; p < 1 || p > 32 {
		bad("limits.prefix_v4", "%d: want 1 to 32", p)
	}
	if p := c.Limits.PrefixV6; p < 1 || p > 128 {
		bad("limits.prefix_v6", "%d: want 1 to 128", p)
	}
	if n := c.Limits.StreamsPerConnection; n < 1 || n > maxStreamsPerConnection {
		bad("limits.streams_per_connection", "%d: want 1 to %d", n, maxStreamsPerConnection)
	}

	checkNames("ddr.names", c.DDR.Names, engine.ParseHostName, bad)
	for i, a := range c.DDR.Addresses {
		if ip, err := netip.ParseAddr(a); err != nil || ip.Zone() != "" || ip.IsUnspecified() {
			bad(fmt.Sprintf("ddr.addresses[%d]", i), "%q is not a unicast IP address", a)
		}
	}

	if (c.AppleProfile.SignCert == "") != (c.AppleProfile.SignKey == "") {
		if c.AppleProfile.SignCert == "" {
			bad("apple_profile.sign_cert", "required with apple_profile.sign_key")
		} else {
			bad("apple_profile.sign_key", "required with apple_profile.sign_cert")
		}
	}

	if c.Dnstap.Address != "" {
		if _, _, err := DnstapAddress(c.Dnstap.Address); err != nil {
			bad("dnstap.address", "%v", err)
		}
	}
	if q := c.Dnstap.Queue; q < 1 || q > 1000000 {
		bad("dnstap.queue", "%d: want 1 to 1000000", q)
	}

	checkODoH(c.ODoH, bad)

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "auto", "json", "console":
	default:
		bad("log.format", "%q: want auto, json or console", c.Log.Format)
	}
	c.checkPolicies(bad)
	// The engine's own check, last: the checks above name the key and
	// line of everything it refuses, so this adds nothing unless they
	// have fallen behind it (a test keeps them level).
	if len(es) == 0 {
		if err := engine.Validate(c.EngineConfig()); err != nil {
			bad("", "%v", err)
		}
	}
	return es.join()
}

// minRotate is the shortest odoh.rotate: clients keep the configurations
// for a while (the target says an hour), and a key lives two periods.
const minRotate = time.Hour

// checkODoH checks the odoh section: the keys' settings need the target,
// the targets the relay, and each target is host or host:port.
func checkODoH(o ODoH, bad func(string, string, ...any)) {
	if !o.Target {
		if o.KeyFile != "" {
			bad("odoh.key_file", "needs odoh.target: true")
		}
		if o.Rotate != 0 {
			bad("odoh.rotate", "needs odoh.target: true")
		}
	}
	if o.Rotate < 0 || (o.Rotate > 0 && o.Rotate < minRotate) {
		bad("odoh.rotate", "%v: want 0 (never) or at least %v", o.Rotate, minRotate)
	}
	if !o.Relay {
		if len(o.Targets) > 0 {
			bad("odoh.targets", "needs odoh.relay: true")
		}
		if o.CARoot != "" {
			bad("odoh.ca_root", "needs odoh.relay: true")
		}
		return
	}
	if len(o.Targets) == 0 {
		bad("odoh.relay", "needs odoh.targets: the relay forwards only to targets on that list")
	}
	for i, t := range o.Targets {
		if err := checkTargetHost(t); err != nil {
			bad(fmt.Sprintf("odoh.targets[%d]", i), "%v", err)
		}
	}
}

// checkTargetHost accepts a host name or IP address, with or without a
// port, as a client writes targethost.
func checkTargetHost(t string) error {
	host := t
	if strings.ContainsAny(t, "/?#@ ") {
		return fmt.Errorf("%q: want host or host:port", t)
	}
	if h, port, err := net.SplitHostPort(t); err == nil {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("%q: port %q is not a number from 1 to 65535", t, port)
		}
		host = h
	} else if strings.Contains(t, ":") {
		if _, err := netip.ParseAddr(t); err != nil {
			return fmt.Errorf("%q: want host or host:port ([IPv6]:port)", t)
		}
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	if _, err := engine.ParseHostName(host); err != nil {
		return fmt.Errorf("%q: want host or host:port", t)
	}
	return nil
}

// maxStreamsPerConnection bounds limits.streams_per_connection: each open
// stream holds about 8 KiB of request state, so one connection at most
// 128 MiB; four times the default in-flight ceiling.
const maxStreamsPerConnection = 16384

// Bounds of tls.acme.redis.lock_lease: a replica that dies holding a lock
// blocks the others for at most one lease.
const (
	minLockLease = time.Second
	maxLockLease = time.Minute
)

// checkStorage checks a Redis storage URL and its settings. Messages never
// repeat the URL, which could hold a password by mistake.
func checkStorage(a ACME, bad func(string, string, ...any)) {
	r := a.Redis
	if r.LockLease < minLockLease || r.LockLease > maxLockLease {
		bad("tls.acme.redis.lock_lease", "%v: want %v to %v", r.LockLease, minLockLease, maxLockLease)
	}
	if r.KeyPrefix == "" || strings.ContainsAny(r.KeyPrefix, " :") {
		bad("tls.acme.redis.key_prefix", "%q: want a non-empty name without spaces or colons", r.KeyPrefix)
	}
	scheme, _, _ := strings.Cut(a.Storage, "://")
	if scheme != "redis" && scheme != "rediss" {
		return
	}
	u, err := url.Parse(a.Storage)
	if err != nil || u.Host == "" {
		bad("tls.acme.storage", "not a valid redis://host:port/db or rediss:// URL")
		return
	}
	if _, has := u.User.Password(); has {
		bad("tls.acme.storage", "a password in the URL is refused: use tls.acme.redis.password_file or $DOHFWD_REDIS_PASSWORD")
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if _, err := strconv.ParseUint(db, 10, 8); err != nil {
			bad("tls.acme.storage", "database %q: want a number (redis://host:port/0)", db)
		}
	}
	if r.CARoot != "" && scheme != "rediss" {
		bad("tls.acme.redis.ca_root", "needs a rediss:// storage URL")
	}
}

// checkListenAddr accepts "" (off) or host:port with an IP or empty host
// and a numeric port; port 0 asks the system for a free one.
func checkListenAddr(s string) error {
	if s == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want IP:port or [IPv6]:port", s)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: %q is not an IP address", s, host)
		}
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", s, port)
	}
	return nil
}

// ParsePrefix reads a trusted proxy: a CIDR, or one IP as a /32 or /128.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: want a CIDR such as 10.0.0.0/8 or an IP address", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// checkNames checks names with the engine's parse.
func checkNames(key string, names []string, parse func(string) (string, error), bad func(string, string, ...any)) {
	for i, n := range names {
		if _, err := parse(n); err != nil {
			bad(fmt.Sprintf("%s[%d]", key, i), "%q: %v", n, err)
		}
	}
}

func checkServers(key string, servers []string, bad func(string, string, ...any)) {
	for i, s := range servers {
		if _, err := engine.ParseEndpoint(s); err != nil {
			bad(fmt.Sprintf("%s[%d]", key, i), "%v", err)
		}
	}
}

// checkUpstreamTLS checks upstream_tls: a CA file that reads and holds a
// PEM certificate, positive bounds.
func checkUpstreamTLS(u UpstreamTLS, bad func(string, string, ...any)) {
	if u.CAFile != "" {
		if err := checkCAFile(u.CAFile); err != nil {
			bad("upstream_tls.ca_file", "%v", err)
		}
	}
	if u.MaxConnections < 1 {
		bad("upstream_tls.max_connections", "%d: must be at least 1", u.MaxConnections)
	}
	if u.IdleTimeout <= 0 {
		bad("upstream_tls.idle_timeout", "%v: must be more than 0", u.IdleTimeout)
	}
}

// checkCAFile reports whether path reads and holds at least one PEM
// CERTIFICATE block. (The certificates themselves are parsed by the
// native build when it loads them: x509 is not linked into the edge
// module, which links this package.)
func checkCAFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return fmt.Errorf("%s: no PEM CERTIFICATE in it", path)
		}
		if blk.Type == "CERTIFICATE" {
			return nil
		}
	}
}
