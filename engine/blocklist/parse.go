package blocklist

import (
	"errors"
	"net/netip"
	"strings"
)

// lineRule is one name a list line lists.
type lineRule struct {
	name  string // lower case, no trailing dot, no "*."
	cover Cover
	allow bool
}

// parseLine reads one line of a hosts, domain or adblock list, calling add
// for each name it lists. It returns why the line cannot be used, or ""
// (a comment or blank line lists nothing and is fine).
func parseLine(line string, add func(lineRule)) (problem string) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' || line[0] == '!' || line[0] == '[' && strings.HasSuffix(line, "]") {
		return ""
	}
	if strings.HasPrefix(line, "||") {
		return parseAdblock(line[2:], false, add)
	}
	if strings.HasPrefix(line, "@@||") {
		return parseAdblock(line[4:], true, add)
	}
	if i := strings.IndexByte(line, '#'); i > 0 && (line[i-1] == ' ' || line[i-1] == '\t') {
		line = strings.TrimSpace(line[:i])
	}
	first, rest, more := strings.Cut(line, " ")
	if !more {
		first, rest, more = strings.Cut(line, "\t")
	}
	if !more {
		name, cover, problem := cleanName(line)
		if problem != "" {
			return problem
		}
		add(lineRule{name: name, cover: cover})
		return ""
	}
	return parseHosts(first, rest, add)
}

// parseHosts reads a hosts line's names after its address, which must be
// one that blocks (unspecified or loopback).
func parseHosts(addr, names string, add func(lineRule)) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return "not a domain, a hosts line or an adblock rule: " + quote(addr) + " is not an address"
	}
	if !a.IsUnspecified() && !a.IsLoopback() {
		return "hosts address " + addr + " does not block: want 0.0.0.0, 127.0.0.1, :: or ::1"
	}
	for _, f := range strings.Fields(names) {
		if hostsSkipped[strings.ToLower(f)] {
			continue
		}
		name, cover, problem := cleanName(f)
		if problem != "" {
			return problem
		}
		add(lineRule{name: name, cover: cover})
	}
	return ""
}

// hostsSkipped are the names a hosts file lists for the machine itself,
// never to block.
var hostsSkipped = map[string]bool{
	"localhost": true, "localhost.localdomain": true, "local": true, "broadcasthost": true,
	"ip6-localhost": true, "ip6-loopback": true, "ip6-localnet": true, "ip6-mcastprefix": true,
	"ip6-allnodes": true, "ip6-allrouters": true, "ip6-allhosts": true, "0.0.0.0": true,
}

// parseAdblock reads the part of `||domain^` after the bars.
func parseAdblock(s string, allow bool, add func(lineRule)) string {
	domain, tail, ok := strings.Cut(s, "^")
	if !ok {
		return "adblock rule without ^ after the domain"
	}
	tail = strings.TrimPrefix(tail, "|")
	if tail != "" && tail != "$important" {
		return "adblock rule: " + quote(tail) + " after ^ is not supported (only $important)"
	}
	name, cover, problem := cleanName(domain)
	if problem != "" {
		return problem
	}
	add(lineRule{name: name, cover: cover, allow: allow})
	return ""
}

// ParseName checks a domain written where a list's name may be (an
// allow entry of the configuration) and returns it as lists keep it.
func ParseName(s string) (string, error) {
	name, cover, problem := cleanName(s)
	if problem != "" {
		return "", errors.New(problem)
	}
	if cover == CoverSubdomains {
		return "*." + name, nil
	}
	return name, nil
}

// cleanName checks a listed name and returns it lower case without its
// trailing dot; a leading "*." makes its cover the subdomains only.
func cleanName(s string) (name string, cover Cover, problem string) {
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		s, cover = rest, CoverSubdomains
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", 0, "empty name"
	}
	if len(s) > 253 {
		return "", 0, "name longer than 253 characters"
	}
	label := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if label == 0 {
				return "", 0, quote(s) + ": empty label"
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', 'A' <= c && c <= 'Z':
		case c >= 0x80:
			return "", 0, quote(s) + ": not an ASCII name (write it in punycode)"
		default:
			return "", 0, quote(s) + ": " + quote(string(c)) + " is not allowed in a name"
		}
		if label++; label > 63 {
			return "", 0, quote(s) + ": label longer than 63 characters"
		}
	}
	if label == 0 {
		return "", 0, quote(s) + ": empty label"
	}
	return strings.ToLower(s), cover, ""
}

// quote is s in double quotes, cut short when long (a bad line may be
// anything at all).
func quote(s string) string {
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}

// isZone says whether a list is an RPZ zone file: its first significant
// line is a directive ($TTL, $ORIGIN) or an SOA record.
func isZone(text string) bool {
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		line = strings.TrimSpace(line)
		if line == "" || line[0] == ';' {
			continue
		}
		if line[0] == '$' {
			return true
		}
		for _, f := range strings.Fields(line) {
			if strings.EqualFold(f, "SOA") {
				return true
			}
			if f[0] == ';' {
				break
			}
		}
		return false
	}
	return false
}
