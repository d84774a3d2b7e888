package main

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// EDNS Client Subnet (RFC 7871) on every front end: a client's ECS option
// never reaches an upstream of a scope with the default policy (strip),
// and no answer carries one back; a scope with ecs: pass sends it on.
func TestECSNotLeakedOnAnyFrontEnd(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		a := upstreamtest.Answer("@ 60 IN A 192.0.2.1")(q)
		if q.Msg != nil && len(a.Replies) > 0 {
			// A server that answers with a subnet of its own: the
			// client must not see it either.
			ecs := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, SourceScope: 24, Address: net.IPv4(198, 51, 100, 0)}
			if o := a.Replies[0].Msg.IsEdns0(); o != nil {
				o.Option = append(o.Option, ecs)
			}
		}
		return a
	})
	yaml := fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  http: 127.0.0.1:0
  dot: 127.0.0.1:0
  dns: 127.0.0.1:0
  admin: 127.0.0.1:0
scopes:
  - name: strip
    default_route: true
    servers: [%[1]s]
  - name: pass
    domains: [pass.test]
    servers: [%[1]s]
    ecs: pass
fallback_servers: [127.0.0.1:1]
log:
  format: json
`, up)
	d := startDohfwd(t, yaml, newPKI(t))
	tls := []string{"+tls-ca=" + d.pki.CA, "+tls-hostname=localhost"}
	fronts := []struct {
		listener string
		args     []string
	}{
		{"https", append([]string{"+https"}, tls...)},
		{"http", []string{"+http-plain"}},
		{"dot", append([]string{"+tls"}, tls...)},
		{"dns-udp", []string{"+notcp"}},
		{"dns-tcp", []string{"+tcp"}},
	}
	for i, f := range fronts {
		host, port, _ := net.SplitHostPort(d.listenerAddr(f.listener))
		for _, zone := range []string{"e2e.test", "pass.test"} {
			name := fmt.Sprintf("ecs%d.%s", i, zone)
			args := append([]string{"@" + host, "-p", port, "+tries=1", "+timeout=5", "+subnet=203.0.113.0/24"}, f.args...)
			out := runTool(t, "dig", append(args, name, "A")...)
			if !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, "192.0.2.1") {
				t.Fatalf("%s %s: not answered:\n%s", f.listener, name, out)
			}
			if strings.Contains(out, "CLIENT-SUBNET") {
				t.Fatalf("%s %s: the answer carries an ECS option:\n%s", f.listener, name, out)
			}
			sent := upstreamECS(t, up, name)
			if zone == "e2e.test" && sent != "" {
				t.Fatalf("%s %s: the client's subnet reached the upstream: %s", f.listener, name, sent)
			}
			if zone == "pass.test" && !strings.HasPrefix(sent, "203.0.113.0/24") {
				t.Fatalf("%s %s: ecs: pass sent %q upstream, want the client's 203.0.113.0/24", f.listener, name, sent)
			}
		}
	}
}

// upstreamECS is the ECS option of the upstream's query for name, as
// address/source-prefix, or "" when it had none.
func upstreamECS(t *testing.T, up *upstreamtest.Server, name string) string {
	t.Helper()
	for _, q := range up.Queries() {
		if q.Msg == nil || !strings.EqualFold(q.Msg.Question[0].Name, name+".") {
			continue
		}
		if o := q.Msg.IsEdns0(); o != nil {
			for _, opt := range o.Option {
				if s, ok := opt.(*dns.EDNS0_SUBNET); ok {
					return fmt.Sprintf("%s/%d", s.Address, s.SourceNetmask)
				}
			}
		}
		return ""
	}
	t.Fatalf("the upstream was not asked %s", name)
	return ""
}
