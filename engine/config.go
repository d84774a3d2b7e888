package engine

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The resolvd bounds. Config fields left zero take these values.
const (
	DefaultTransactionTimeout = 2 * time.Second
	DefaultAttempts           = 3
	DefaultDemotionPeriod     = 30 * time.Second
	DefaultInFlightCeiling    = 4096
)

// Config is everything the engine needs to answer questions. The server's
// YAML file decodes into a superset of it; an edge host gets the same.
type Config struct {
	TransactionTimeout time.Duration
	Attempts           int
	DemotionPeriod     time.Duration
	InFlightCeiling    int
	// QuestionTimeout bounds a whole question; 0 means no bound beyond
	// the attempt rules.
	QuestionTimeout time.Duration
	Probe           bool
	// ForwardECS keeps a client's EDNS Client Subnet option upstream in
	// every scope whose ECS policy is ECSDefault, and for the fallback
	// servers.
	ForwardECS bool
	// UpstreamCookies sends every server DNS cookies (RFC 7873) and
	// ignores replies that do not carry its own; Upstream0x20 asks every
	// name in random case and ignores replies that do not keep it. A
	// scope may opt out of either (ScopeConfig); the fallback servers
	// have both when these are on. dohfwd's configuration turns both on.
	UpstreamCookies bool
	Upstream0x20    bool
	// EDEHideServers leaves the attempts (servers, transports, outcomes)
	// out of an unavailable answer's Extended DNS Error; its info-code
	// and reason stay.
	EDEHideServers bool

	// EncryptedConnections bounds the connections kept open to each DoT
	// server (0: DefaultEncryptedConnections); EncryptedIdle is how long
	// an unused one stays open (0: DefaultEncryptedIdle).
	EncryptedConnections int
	EncryptedIdle        time.Duration

	Scopes          []ScopeConfig
	FallbackServers []string
	Hosts           map[string][]string
	Cache           CacheConfig
}

// ScopeConfig is one scope as configured.
type ScopeConfig struct {
	Name         string
	Domains      []string
	DefaultRoute bool
	Servers      []string
	Search       []string
	SourcesV4    []string
	SourcesV6    []string
	// ECS is what becomes of a client's EDNS Client Subnet option (RFC
	// 7871) in the scope's queries.
	ECS ECSPolicy
	// ECSPrefixV4 and ECSPrefixV6 are the source prefixes ECSAdd sends;
	// 0 takes DefaultECSPrefixV4 and DefaultECSPrefixV6.
	ECSPrefixV4, ECSPrefixV6 int
	// NoUpstreamCookies sends the scope's servers no DNS cookies (RFC
	// 7873) when Config.UpstreamCookies is on, for servers that mishandle
	// them.
	NoUpstreamCookies bool
	// NoUpstream0x20 asks the scope's servers each name in the case the
	// client wrote it, not in random case, and matches replies without
	// regard to case, when Config.Upstream0x20 is on.
	NoUpstream0x20 bool
}

// ECSPolicy says whether a client's EDNS Client Subnet option reaches a
// scope's servers. Answers never carry one back: the engine strips it
// from every reply it stores (hopOptionsRemoved).
type ECSPolicy uint8

const (
	ECSDefault ECSPolicy = iota // as Config.ForwardECS says
	ECSStrip                    // the option never reaches an upstream
	ECSPass                     // the option goes upstream as the client wrote it; the answer is neither cached nor shared
	ECSAdd                      // the engine sends the client's subnet (WithClient), cached per the scope prefix returned
)

// The default source prefixes of ECSAdd (RFC 7871 §11.1).
const (
	DefaultECSPrefixV4 = 24
	DefaultECSPrefixV6 = 56
)

// The cache's TTL bounds. Zero MaxTTL and NegativeMaxTTL take these.
const (
	DefaultCacheMaxTTL         = 24 * time.Hour
	DefaultCacheNegativeMaxTTL = time.Hour
)

// CacheConfig bounds the answer cache.
type CacheConfig struct {
	// MaxEntries bounds the cache; 0 turns it off.
	MaxEntries int
	// MinTTL raises every cached TTL to at least this.
	MinTTL time.Duration
	// MaxTTL caps the TTLs of positive answers.
	MaxTTL time.Duration
	// NegativeMaxTTL caps the TTL of NXDOMAIN and NODATA answers, which
	// is otherwise the SOA's (RFC 2308).
	NegativeMaxTTL time.Duration

	// StaleMax is how long an expired answer is kept to be served stale
	// (RFC 8767) when its question would be unavailable; 0 turns
	// serve-stale off.
	StaleMax time.Duration
	// StaleTTL is the TTL of a stale answer's records; 0 takes
	// DefaultStaleTTL.
	StaleTTL time.Duration
	// StaleAnswerAfter is the client response timer (RFC 8767 §5): a
	// question with a stale answer not answered by then gets it, while
	// its upstream question goes on. 0 turns the timer off.
	StaleAnswerAfter time.Duration
	// PrefetchMinHits is how many times an entry must be asked during
	// its life to be refreshed in the background when asked in its last
	// tenth; 0 turns prefetch off.
	PrefetchMinHits int
}

// DefaultStaleTTL is the TTL of stale answers, RFC 8767 §4's suggestion.
const DefaultStaleTTL = 30 * time.Second

// withDefaults returns c with every zero engine value replaced by its default.
func (c Config) withDefaults() Config {
	if c.TransactionTimeout <= 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.Attempts <= 0 {
		c.Attempts = DefaultAttempts
	}
	if c.DemotionPeriod <= 0 {
		c.DemotionPeriod = DefaultDemotionPeriod
	}
	if c.InFlightCeiling <= 0 {
		c.InFlightCeiling = DefaultInFlightCeiling
	}
	if c.EncryptedConnections <= 0 {
		c.EncryptedConnections = DefaultEncryptedConnections
	}
	if c.EncryptedIdle <= 0 {
		c.EncryptedIdle = DefaultEncryptedIdle
	}
	if c.Cache.MaxTTL <= 0 {
		c.Cache.MaxTTL = DefaultCacheMaxTTL
	}
	if c.Cache.NegativeMaxTTL <= 0 {
		c.Cache.NegativeMaxTTL = DefaultCacheNegativeMaxTTL
	}
	if c.Cache.StaleTTL <= 0 {
		c.Cache.StaleTTL = DefaultStaleTTL
	}
	return c
}

// IPv6 zones ("fe80::1%eth0") are refused in every address the engine is
// configured with: a zone names an interface of one machine, the engine
// does not bind to interfaces, and the same file would mean another
// server elsewhere. Use a global or unique-local address.

// ParseServer reads a server as IP, IP:port or [IPv6]:port; the port
// defaults to 53.
func ParseServer(s string) (netip.AddrPort, error) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return serverAddr(s, a, 53)
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		// "[::1]" without a port.
		if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
			if a, err2 := netip.ParseAddr(s[1 : len(s)-1]); err2 == nil {
				return serverAddr(s, a, 53)
			}
		}
		return netip.AddrPort{}, fmt.Errorf("server %q: want IP, IP:port or [IPv6]:port", s)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("server %q: port 0", s)
	}
	return serverAddr(s, ap.Addr(), ap.Port())
}

func serverAddr(s string, a netip.Addr, port uint16) (netip.AddrPort, error) {
	if a.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("server %q: IPv6 zones are not supported", s)
	}
	return netip.AddrPortFrom(a.Unmap(), port), nil
}

// ParseSource reads an egress source address of the given family (4 or 6).
func ParseSource(s string, family int) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("source %q: not an IP address", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("source %q: IPv6 zones are not supported", s)
	}
	a = a.Unmap()
	if (family == 4) != a.Is4() {
		return netip.Addr{}, fmt.Errorf("source %q: not an IPv%s address", s, strconv.Itoa(family))
	}
	return a, nil
}

// ParseDomain reads a scope's domain as the question path compares it:
// fully qualified, lowercased, internationalized names in punycode.
func ParseDomain(d string) (string, error) { return domainASCII(d) }

// ParseSearchDomain reads a search domain: a domain other than the root.
func ParseSearchDomain(d string) (string, error) {
	fqdn, err := domainASCII(d)
	if err == nil && fqdn == "." {
		err = fmt.Errorf("the root is not a search domain")
	}
	return fqdn, err
}

// ParseHostName reads a name of the hosts table: a domain other than the
// root.
func ParseHostName(name string) (string, error) {
	fqdn, err := domainASCII(name)
	if err != nil || fqdn == "." {
		return "", fmt.Errorf("hosts %q: not a domain name", name)
	}
	return fqdn, nil
}

// ParseHostAddress reads an address of the hosts table.
func ParseHostAddress(name, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("hosts %q: address %q is not an IP address", name, s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("hosts %q: address %q: IPv6 zones are not supported", name, s)
	}
	return a.Unmap(), nil
}

// Validate reports what New would refuse in cfg, without building an
// engine: package config runs it after its own checks, so that nothing the
// engine refuses gets past dohfwd check-config.
func Validate(cfg Config) error {
	_, err := buildRoutes(cfg.withDefaults(), newUpstream)
	return err
}
