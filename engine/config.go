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
	// ForwardECS keeps a client's EDNS Client Subnet option upstream.
	ForwardECS bool
	// EDEHideServers leaves the attempts (servers, transports, outcomes)
	// out of an unavailable answer's Extended DNS Error; its info-code
	// and reason stay.
	EDEHideServers bool

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
}

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
}

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
	if c.Cache.MaxTTL <= 0 {
		c.Cache.MaxTTL = DefaultCacheMaxTTL
	}
	if c.Cache.NegativeMaxTTL <= 0 {
		c.Cache.NegativeMaxTTL = DefaultCacheNegativeMaxTTL
	}
	return c
}

// ParseServer reads a server as IP, IP:port or [IPv6]:port; the port
// defaults to 53.
func ParseServer(s string) (netip.AddrPort, error) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.AddrPort{}, fmt.Errorf("server %q: zones are not supported", s)
		}
		return netip.AddrPortFrom(a.Unmap(), 53), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		// "[::1]" without a port.
		if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
			if a, err2 := netip.ParseAddr(s[1 : len(s)-1]); err2 == nil {
				return netip.AddrPortFrom(a, 53), nil
			}
		}
		return netip.AddrPort{}, fmt.Errorf("server %q: want IP, IP:port or [IPv6]:port", s)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("server %q: port 0", s)
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}

// ParseSource reads an egress source address of the given family (4 or 6).
func ParseSource(s string, family int) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("source %q: not an IP address", s)
	}
	a = a.Unmap()
	if (family == 4) != a.Is4() {
		return netip.Addr{}, fmt.Errorf("source %q: not an IPv%s address", s, strconv.Itoa(family))
	}
	return a, nil
}
