package doh

import "testing"

// Alt-Svc names the port the client reached the HTTPS listener on when
// the QUIC side shares the listener's port (a balancer maps both
// protocols alike), else the QUIC side's own port.
func TestAltSvcFollowsTheClientsPort(t *testing.T) {
	same := &altSvc{port: "8443", bound: AltSvcValue(8443), https: AltSvcValue(443), followHost: true}
	own := &altSvc{port: "40000", bound: AltSvcValue(40000), https: AltSvcValue(443)}
	for _, tc := range []struct {
		a    *altSvc
		host string
		want string
	}{
		{same, "doh.example.net", `h3=":443"; ma=86400`},
		{same, "doh.example.net:8443", `h3=":8443"; ma=86400`},
		{same, "127.0.0.1:9443", `h3=":9443"; ma=86400`},
		{same, "[2001:db8::1]", `h3=":443"; ma=86400`},
		{same, "[2001:db8::1]:8443", `h3=":8443"; ma=86400`},
		{same, "doh.example.net:bad", `h3=":8443"; ma=86400`},
		{own, "doh.example.net", `h3=":40000"; ma=86400`},
		{own, "127.0.0.1:8443", `h3=":40000"; ma=86400`},
	} {
		if got := tc.a.value(tc.host); got != tc.want {
			t.Errorf("host %q (follow %v): %q, want %q", tc.host, tc.a.followHost, got, tc.want)
		}
	}
}
