package engine

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"
)

// Endpoint is one configured server as the engine reaches it: its
// transport, address and, for an encrypted one, the TLS name it verifies,
// the DoH path and the SPKI pins. A plain server (Transport UDP: UDP
// first, TCP after a truncated reply) has only Addr.
//
// An Endpoint is what an upstream's demotion mark belongs to. For a plain
// server that is its address (ip:port), as ever. An encrypted server is
// a different endpoint from a plain one on the same IP (their ports
// differ: 53, 853, 443), so "1.2.3.4" and "tls://1.2.3.4" keep separate
// marks; "tls://1.2.3.4#a" and "tls://1.2.3.4#b" are different endpoints
// too, since a wrong name fails one and not the other.
type Endpoint struct {
	Transport Transport // UDP (plain), DoT or DoH
	Addr      netip.AddrPort
	Name      string // the TLS server name: SNI and the certificate's name
	Path      string // the DoH request path (DoH only), "/dns-query" by default
	// Pins are SHA-256 digests of acceptable SubjectPublicKeyInfos (RFC
	// 7469's pin-sha256); with pins, a certificate chain is accepted
	// when one of its certificates' SPKI has one of them, on top of the
	// usual verification.
	Pins [][PinLen]byte
	key  string // String(), made once
}

// The default ports of the encrypted transports.
const (
	DefaultDoTPort = 853
	DefaultDoHPort = 443
)

// Encrypted reports whether the endpoint is DoT or DoH.
func (ep *Endpoint) Encrypted() bool { return ep.Transport == DoT || ep.Transport == DoH }

// String is the endpoint as configured, in canonical form: "ip:port" for a
// plain server (as before encrypted ones existed), else
// "tls://ip:port#name" or "https://ip:port/path#name", with "?pin=..."
// for each pin. Logs, /status, EDE and metrics name servers by it.
func (ep *Endpoint) String() string {
	if ep.key != "" {
		return ep.key
	}
	return ep.canonical()
}

func (ep *Endpoint) canonical() string {
	switch ep.Transport {
	case DoT, DoH:
	default:
		return ep.Addr.String()
	}
	var b strings.Builder
	if ep.Transport == DoT {
		b.WriteString("tls://")
	} else {
		b.WriteString("https://")
	}
	b.WriteString(ep.Addr.String())
	if ep.Transport == DoH {
		b.WriteString(ep.Path)
	}
	b.WriteString("#")
	b.WriteString(ep.Name)
	for i, p := range ep.Pins {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("pin=sha256/")
		b.WriteString(base64.StdEncoding.EncodeToString(p[:]))
	}
	return b.String()
}

// ParseEndpoint reads a server as configured:
//
//	IP, IP:port, [IPv6]:port                  plain DNS, port 53
//	tls://IP[:PORT]#NAME                      DNS over TLS (RFC 7858), port 853
//	https://IP[:PORT][/PATH]#NAME             DoH (RFC 8484), port 443, path /dns-query
//
// An encrypted server may end with one or more SPKI pins:
// "?pin=sha256/BASE64[&pin=sha256/BASE64]" after the name (the base64 of
// the SHA-256 of the certificate's SubjectPublicKeyInfo, as `openssl x509
// -pubkey | openssl pkey -pubin -outform der | openssl dgst -sha256
// -binary | base64` prints it).
func ParseEndpoint(s string) (Endpoint, error) {
	s = strings.TrimSpace(s)
	scheme, rest, hasScheme := strings.Cut(s, "://")
	if !hasScheme {
		ap, err := ParseServer(s)
		if err != nil {
			return Endpoint{}, err
		}
		ep := Endpoint{Transport: UDP, Addr: ap}
		ep.key = ep.canonical()
		return ep, nil
	}
	var ep Endpoint
	port := uint16(0)
	switch strings.ToLower(scheme) {
	case "tls":
		ep.Transport, port = DoT, DefaultDoTPort
	case "https":
		ep.Transport, port = DoH, DefaultDoHPort
	default:
		return Endpoint{}, fmt.Errorf("server %q: unknown scheme %q: want tls:// or https:// (or a plain IP[:PORT])", s, scheme)
	}
	hostPath, frag, ok := strings.Cut(rest, "#")
	if !ok || frag == "" {
		return Endpoint{}, fmt.Errorf("server %q: no TLS name: want %s://IP[:PORT]%s#NAME", s, scheme, map[bool]string{true: "/PATH", false: ""}[ep.Transport == DoH])
	}
	name, query, _ := strings.Cut(frag, "?")
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if err := checkTLSName(name); err != nil {
		return Endpoint{}, fmt.Errorf("server %q: TLS name %q: %v", s, name, err)
	}
	ep.Name = name
	host := hostPath
	if i := strings.IndexByte(hostPath, '/'); i >= 0 {
		if ep.Transport != DoH {
			return Endpoint{}, fmt.Errorf("server %q: a path is for https:// servers only", s)
		}
		host, ep.Path = hostPath[:i], hostPath[i:]
		if strings.ContainsAny(ep.Path, "?# ") {
			return Endpoint{}, fmt.Errorf("server %q: path %q: no query, fragment or space", s, ep.Path)
		}
	}
	if ep.Transport == DoH && (ep.Path == "" || ep.Path == "/") {
		ep.Path = "/dns-query"
	}
	ap, err := parseHostPort(host, port)
	if err != nil {
		return Endpoint{}, fmt.Errorf("server %q: %v", s, err)
	}
	ep.Addr = ap
	if query != "" {
		for _, kv := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(kv, "=")
			if k != "pin" {
				return Endpoint{}, fmt.Errorf("server %q: %q: only pin=sha256/BASE64 may follow the name", s, kv)
			}
			pin, err := ParsePin(v)
			if err != nil {
				return Endpoint{}, fmt.Errorf("server %q: %v", s, err)
			}
			ep.Pins = append(ep.Pins, pin)
		}
	}
	ep.key = ep.canonical()
	return ep, nil
}

// ParsePin reads an SPKI pin, "sha256/BASE64" (standard base64 of the
// 32-byte digest, padding optional).
func ParsePin(v string) ([PinLen]byte, error) {
	var out [PinLen]byte
	b64, ok := strings.CutPrefix(v, "sha256/")
	if !ok {
		return out, fmt.Errorf("pin %q: want sha256/BASE64", v)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(b64)
	}
	if err != nil {
		return out, fmt.Errorf("pin %q: not base64: %v", v, err)
	}
	if len(raw) != PinLen {
		return out, fmt.Errorf("pin %q: %d bytes, want the 32 of a SHA-256 digest", v, len(raw))
	}
	copy(out[:], raw)
	return out, nil
}

// parseHostPort reads IP, IP:port, [IPv6] or [IPv6]:port with port def
// when none is given.
func parseHostPort(host string, def uint16) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return serverAddr(host, a, def)
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		if a, err := netip.ParseAddr(host[1 : len(host)-1]); err == nil {
			return serverAddr(host, a, def)
		}
	}
	ap, err := netip.ParseAddrPort(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: want IP, IP:port or [IPv6]:port", host)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("address %q: port 0", host)
	}
	return serverAddr(host, ap.Addr(), ap.Port())
}

// checkTLSName accepts a host name of letters, digits, hyphens and dots
// (or an IP address, for a certificate with an IP SAN).
func checkTLSName(name string) error {
	if _, err := netip.ParseAddr(name); err == nil {
		return nil
	}
	if name == "" || len(name) > 253 {
		return fmt.Errorf("empty or too long")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("empty or too long label")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '*' && i == 0 && len(label) == 1) {
				return fmt.Errorf("%q is not a host name character", c)
			}
		}
	}
	return nil
}

// PinLen is the length of an SPKI pin: a SHA-256 digest.
const PinLen = 32
