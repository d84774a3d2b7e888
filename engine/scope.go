package engine

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// FallbackScope is the scope name reported for questions that no
// configured scope takes.
const FallbackScope = "fallback"

// scope is one configured scope, ready for the question path.
type scope struct {
	name         string
	domains      []string // lowercased, fully qualified
	defaultRoute bool
	servers      []*upstream
	search       []string // fully qualified
	sourcesV4    []netip.Addr
	sourcesV6    []netip.Addr
	nextV4       atomic.Uint32 // round-robin position in sourcesV4
	nextV6       atomic.Uint32
	reported     bool // false for the fallback servers: their demotion is not reported
	// cookies and mixCase: DNS cookies (cookie.go) and 0x20 (namecase.go)
	// toward the scope's servers.
	cookies, mixCase bool
	// forwardECS sends a client's EDNS Client Subnet option to the
	// scope's servers (ECSPass).
	forwardECS bool
	// ecsAdd sends the client's subnet at prefix4 or prefix6 bits
	// (ECSAdd, ecs.go).
	ecsAdd           bool
	prefix4, prefix6 int
}

// source returns the egress address for a transaction to server: the
// scope's sources of the server's family, round-robin; none gives the zero
// Addr and the system chooses.
func (s *scope) source(server netip.AddrPort) netip.Addr {
	list, next := s.sourcesV4, &s.nextV4
	if server.Addr().Is6() {
		list, next = s.sourcesV6, &s.nextV6
	}
	if len(list) == 0 {
		return netip.Addr{}
	}
	return list[int(next.Add(1)-1)%len(list)]
}

// routes is one immutable configuration: the engine values, the scopes,
// the local names, the cache and the questions in flight upstream.
// Questions load it once and keep it to their end, so a reload never
// changes a question midway, and a question never joins a flight asked
// under another configuration.
type routes struct {
	cfg      *Config
	scopes   []*scope
	fallback *scope
	local    *localNames
	cache    *answerCache // nil: no cache
	flights  flights
	// generation numbers the engine's configurations, from 1: an entry
	// is published to a hit mirror once per generation (publishHit).
	generation uint32
}

// route returns the scope for name: the longest routing-domain suffix
// (label-wise, case-insensitive; ties to the first scope), else the first
// default-route scope with servers, else the fallback servers.
func (r *routes) route(name string) *scope {
	s, _, _ := r.routeFor(name)
	return s
}

// RouteBy says why a question went to its scope.
type RouteBy uint8

const (
	RouteByDomain   RouteBy = iota // the longest matching routing domain
	RouteByDefault                 // the first default-route scope with servers
	RouteByFallback                // no scope took it: the fallback servers
)

var routeByNames = [...]string{"routing domain", "default route", "fallback"}

func (b RouteBy) String() string {
	if int(b) < len(routeByNames) {
		return routeByNames[b]
	}
	return "unknown"
}

// routeFor is the routing rule: the scope for name, why, and the routing
// domain that matched (RouteByDomain only). Questions and Explain both
// use it, so an explanation cannot disagree with what a question does.
func (r *routes) routeFor(name string) (*scope, RouteBy, string) {
	if !dnswire.IsFqdn(name) {
		name = dnswire.Fqdn(name)
	}
	var best *scope
	bestLen, bestDomain := -1, ""
	for _, s := range r.scopes {
		for _, d := range s.domains {
			if len(d) > bestLen && inDomain(name, d) {
				best, bestLen, bestDomain = s, len(d), d
			}
		}
	}
	if best != nil {
		return best, RouteByDomain, bestDomain
	}
	for _, s := range r.scopes {
		if s.defaultRoute && len(s.servers) > 0 {
			return s, RouteByDefault, ""
		}
	}
	return r.fallback, RouteByFallback, ""
}

// inDomain reports whether name equals domain or lies below it, label-wise
// and without regard to case. Both are fully qualified; domain "." holds
// every name.
func inDomain(name, domain string) bool {
	if domain == "." {
		return true
	}
	if len(name) < len(domain) {
		return false
	}
	if !strings.EqualFold(name[len(name)-len(domain):], domain) {
		return false
	}
	return len(name) == len(domain) || name[len(name)-len(domain)-1] == '.'
}

// domainASCII returns a configured domain as the question path compares
// it: fully qualified, lowercased, internationalized names in punycode.
func domainASCII(d string) (string, error) {
	d = strings.TrimSpace(d)
	if d == "" {
		return "", fmt.Errorf("empty name")
	}
	if !isASCII(d) {
		a, err := punycode(d)
		if err != nil {
			return "", err
		}
		d = a
	}
	d = strings.ToLower(dnswire.Fqdn(d))
	if _, ok := dnswire.IsDomainName(d); !ok {
		return "", fmt.Errorf("%q is not a domain name", d)
	}
	return d, nil
}

// ASCIIName is name with an internationalized name in punycode, as
// ParseDomain reads it (a name in ASCII is returned as it is): for what
// hands names to the edge module, which converts none (see punycode). A
// name that cannot be converted is returned as it is, for ParseDomain to
// refuse.
func ASCIIName(name string) string {
	if isASCII(name) {
		return name
	}
	if a, err := punycode(strings.TrimSpace(name)); err == nil {
		return a
	}
	return name
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// buildRoutes turns configuration into routes, reusing the upstream of
// every address already known so marks survive a reload. cfg has its
// defaults.
func buildRoutes(cfg Config, known func(Endpoint) *upstream) (*routes, error) {
	r := &routes{cfg: &cfg}
	seen := map[string]bool{}
	for i, sc := range cfg.Scopes {
		if sc.Name == "" {
			return nil, fmt.Errorf("scopes[%d]: name is empty", i)
		}
		if sc.Name == FallbackScope || seen[sc.Name] {
			return nil, fmt.Errorf("scope %q: name is taken", sc.Name)
		}
		seen[sc.Name] = true
		s := &scope{name: sc.Name, defaultRoute: sc.DefaultRoute, reported: true,
			cookies: cfg.UpstreamCookies && !sc.NoUpstreamCookies, mixCase: cfg.Upstream0x20 && !sc.NoUpstream0x20,
			forwardECS: sc.ECS == ECSPass || sc.ECS == ECSDefault && cfg.ForwardECS}
		if sc.ECS > ECSAdd {
			return nil, fmt.Errorf("scope %q: ECS policy %d: want strip, pass or add", sc.Name, sc.ECS)
		}
		s.ecsAdd, s.prefix4, s.prefix6 = sc.ECS == ECSAdd, sc.ECSPrefixV4, sc.ECSPrefixV6
		if s.prefix4 == 0 {
			s.prefix4 = DefaultECSPrefixV4
		}
		if s.prefix6 == 0 {
			s.prefix6 = DefaultECSPrefixV6
		}
		if s.prefix4 < 0 || s.prefix4 > 32 || s.prefix6 < 0 || s.prefix6 > 128 {
			return nil, fmt.Errorf("scope %q: ECS prefixes /%d and /%d: want at most /32 and /128", sc.Name, s.prefix4, s.prefix6)
		}
		for _, d := range sc.Domains {
			fqdn, err := domainASCII(d)
			if err != nil {
				return nil, fmt.Errorf("scope %q: domain %q: %w", sc.Name, d, err)
			}
			s.domains = append(s.domains, fqdn)
		}
		for _, d := range sc.Search {
			fqdn, err := ParseSearchDomain(d)
			if err != nil {
				return nil, fmt.Errorf("scope %q: search domain %q: %w", sc.Name, d, err)
			}
			s.search = append(s.search, fqdn)
		}
		var err error
		if s.servers, err = upstreams(sc.Servers, known); err != nil {
			return nil, fmt.Errorf("scope %q: %w", sc.Name, err)
		}
		for _, a := range sc.SourcesV4 {
			ip, err := ParseSource(a, 4)
			if err != nil {
				return nil, fmt.Errorf("scope %q: sources_v4: %w", sc.Name, err)
			}
			s.sourcesV4 = append(s.sourcesV4, ip)
		}
		for _, a := range sc.SourcesV6 {
			ip, err := ParseSource(a, 6)
			if err != nil {
				return nil, fmt.Errorf("scope %q: sources_v6: %w", sc.Name, err)
			}
			s.sourcesV6 = append(s.sourcesV6, ip)
		}
		r.scopes = append(r.scopes, s)
	}
	fb, err := upstreams(cfg.FallbackServers, known)
	if err != nil {
		return nil, fmt.Errorf("fallback_servers: %w", err)
	}
	r.fallback = &scope{name: FallbackScope, servers: fb, cookies: cfg.UpstreamCookies, mixCase: cfg.Upstream0x20,
		forwardECS: cfg.ForwardECS}
	if r.local, err = buildLocal(cfg.Hosts); err != nil {
		return nil, err
	}
	return r, nil
}

// takeCache gives r its cache: prev's when the reload changes neither the
// cache settings nor where questions go (scopes, servers, fallback), since
// its answers are still the ones r would fetch; else a fresh one. Hosts
// are answered before the cache, so they need no flush.
func (r *routes) takeCache(prev *routes) {
	if prev != nil && prev.cache != nil && prev.cfg.Cache == r.cfg.Cache &&
		sameRouting(prev.cfg, r.cfg) {
		r.cache = prev.cache
		return
	}
	r.cache = newAnswerCache(r.cfg.Cache)
	if prev != nil && prev.cache != nil && r.cache != nil {
		r.cache.keepStale(prev.cache, r.hasScope)
	}
}

// sameRouting reports whether a and b send every question to the same
// servers the same way.
func sameRouting(a, b *Config) bool {
	if a.ForwardECS != b.ForwardECS || !slices.Equal(a.FallbackServers, b.FallbackServers) ||
		len(a.Scopes) != len(b.Scopes) {
		return false
	}
	for i := range a.Scopes {
		x, y := a.Scopes[i], b.Scopes[i]
		if x.Name != y.Name || x.DefaultRoute != y.DefaultRoute || !slices.Equal(x.Domains, y.Domains) ||
			!slices.Equal(x.Servers, y.Servers) || !slices.Equal(x.Search, y.Search) || x.ECS != y.ECS ||
			x.ECSPrefixV4 != y.ECSPrefixV4 || x.ECSPrefixV6 != y.ECSPrefixV6 {
			return false
		}
	}
	return true
}

func upstreams(list []string, known func(Endpoint) *upstream) ([]*upstream, error) {
	var out []*upstream
	for _, s := range list {
		ep, err := ParseEndpoint(s)
		if err != nil {
			return nil, err
		}
		out = append(out, known(ep))
	}
	return out, nil
}
