package doh

import (
	"net/netip"
	"strings"
)

// ClientIP works out a request's client address. Forwarding headers are
// believed only when peer is in trusted: then the hops they list are walked
// from the right (the hop nearest to us), skipping trusted proxies, and the
// first untrusted address is the client. A hop that is not an address
// ("unknown", an obfuscated name) ends the walk at the proxy that wrote it.
// When every hop is trusted the leftmost is the client.
//
// forwarded holds the Forwarded header lines (RFC 7239, its for=
// parameters), xff the X-Forwarded-For lines; Forwarded is used when
// present. Quoted commas inside Forwarded values are not supported.
func ClientIP(peer netip.Addr, trusted []netip.Prefix, forwarded, xff []string) netip.Addr {
	if !isTrusted(peer, trusted) {
		return peer
	}
	lines, forParam := xff, false
	if len(forwarded) > 0 {
		lines, forParam = forwarded, true
	}
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		rest := lines[i]
		for rest != "" {
			var hop string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				hop, rest = rest[j+1:], rest[:j]
			} else {
				hop, rest = rest, ""
			}
			if forParam {
				hop = forwardedFor(hop)
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue
			}
			a, ok := parseHop(hop)
			if !ok {
				return client
			}
			if !isTrusted(a, trusted) {
				return a
			}
			client = a
		}
	}
	return client
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedFor returns the for= value of one Forwarded element
// ("for=192.0.2.60;proto=http;by=203.0.113.43"), unquoted; "" if none.
func forwardedFor(element string) string {
	for element != "" {
		var pair string
		pair, element, _ = strings.Cut(element, ";")
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
			v = strings.TrimSpace(v)
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			if v == "" {
				return "unknown" // present but empty: not an address
			}
			return v
		}
	}
	return ""
}

// parseHop reads one hop: an IPv4 or IPv6 address, optionally with a port
// ("192.0.2.1:4711", "[2001:db8::1]:4711", "[2001:db8::1]").
func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}
