package setup

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/dohfwd/dohfwd/doh/internal/ddr"
)

// Site is what the page and the profile tell a device.
type Site struct {
	// Name is the server's host name (or IP address): the DoT host and
	// the name its certificate is checked against.
	Name string
	// DoHURL is the DoH URL, e.g. https://dns.example.net/dns-query.
	DoHURL string
	// DoT says whether a DoT listener runs; DoTPort is its port.
	DoT     bool
	DoTPort uint16
	// Addresses are the server's addresses (Windows asks for one).
	Addresses []netip.Addr
}

// SiteFrom works out the site from the designation (the configured names
// and addresses and the listeners' ports; see ddr) and, for what it does
// not say, the Host the client asked for. path is the DoH path.
func SiteFrom(d ddr.Designation, path, requestHost string) Site {
	s := Site{Addresses: d.Addresses}
	reqHost, reqPort, err := net.SplitHostPort(requestHost)
	if err != nil {
		reqHost, reqPort = requestHost, ""
	}
	if len(reqHost) > 1 && reqHost[0] == '[' { // a bracketed IPv6 without a port
		reqHost = reqHost[1 : len(reqHost)-1]
	}
	s.Name = reqHost
	if len(d.Names) > 0 {
		s.Name = d.Names[0]
	}
	port := reqPort
	for _, e := range d.Endpoints {
		switch e.Protocol {
		case ddr.DoH:
			port = strconv.Itoa(int(e.Port))
			if e.Path != "" {
				path = e.Path
			}
		case ddr.DoT:
			s.DoT, s.DoTPort = true, e.Port
		}
	}
	host := s.Name
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		host = "[" + host + "]"
	}
	if port != "" && port != "443" {
		host += ":" + port
	}
	s.DoHURL = "https://" + host + path
	return s
}
