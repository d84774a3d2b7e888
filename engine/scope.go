package engine

import (
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"
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
	nextSource   atomic.Uint32
	reported     bool // false for the fallback servers: their demotion is not reported
}

// source returns the egress address for a transaction to server: the
// scope's sources of the server's family, round-robin; none gives the zero
// Addr and the system chooses.
func (s *scope) source(server netip.AddrPort) netip.Addr {
	list := s.sourcesV4
	if server.Addr().Is6() {
		list = s.sourcesV6
	}
	if len(list) == 0 {
		return netip.Addr{}
	}
	return list[int(s.nextSource.Add(1)-1)%len(list)]
}

// routes is one immutable configuration of scopes. Questions load it once
// and keep it to their end, so a reload never changes a question midway.
type routes struct {
	scopes   []*scope
	fallback *scope
}

// route returns the scope for name: the longest routing-domain suffix
// (label-wise, case-insensitive; ties to the first scope), else the first
// default-route scope with servers, else the fallback servers.
func (r *routes) route(name string) *scope {
	var best *scope
	bestLen := -1
	for _, s := range r.scopes {
		for _, d := range s.domains {
			if len(d) > bestLen && inDomain(name, d) {
				best, bestLen = s, len(d)
			}
		}
	}
	if best != nil {
		return best
	}
	for _, s := range r.scopes {
		if s.defaultRoute && len(s.servers) > 0 {
			return s
		}
	}
	return r.fallback
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

// buildRoutes turns configuration into routes, reusing the upstream of
// every address already known so marks survive a reload.
func buildRoutes(cfg Config, known func(netip.AddrPort) *upstream) (*routes, error) {
	r := &routes{}
	seen := map[string]bool{}
	for i, sc := range cfg.Scopes {
		if sc.Name == "" {
			return nil, fmt.Errorf("scopes[%d]: name is empty", i)
		}
		if sc.Name == FallbackScope || seen[sc.Name] {
			return nil, fmt.Errorf("scope %q: name is taken", sc.Name)
		}
		seen[sc.Name] = true
		s := &scope{name: sc.Name, defaultRoute: sc.DefaultRoute, reported: true}
		for _, d := range sc.Domains {
			if _, ok := dns.IsDomainName(d); !ok || d == "" {
				return nil, fmt.Errorf("scope %q: domain %q is not a domain name", sc.Name, d)
			}
			s.domains = append(s.domains, strings.ToLower(dns.Fqdn(d)))
		}
		for _, d := range sc.Search {
			if _, ok := dns.IsDomainName(d); !ok || d == "" || d == "." {
				return nil, fmt.Errorf("scope %q: search domain %q is not a domain name", sc.Name, d)
			}
			s.search = append(s.search, dns.Fqdn(d))
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
	r.fallback = &scope{name: FallbackScope, servers: fb}
	return r, nil
}

func upstreams(list []string, known func(netip.AddrPort) *upstream) ([]*upstream, error) {
	var out []*upstream
	for _, s := range list {
		ap, err := ParseServer(s)
		if err != nil {
			return nil, err
		}
		out = append(out, known(ap))
	}
	return out, nil
}
