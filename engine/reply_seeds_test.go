//go:build fuzzseeds

package engine_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// TestWriteReplySeeds captures real replies from nsd into
// testdata/replies, the seed corpus of FuzzUpstreamReply:
//
//	go test -tags fuzzseeds -run TestWriteReplySeeds ./engine
func TestWriteReplySeeds(t *testing.T) {
	server := upstreamtest.StartNSD(t, upstreamtest.Zone{Origin: "example.com.", Text: `$ORIGIN example.com.
$TTL 300
@ IN SOA ns.example.com. admin.example.com. 1 3600 600 86400 120
@ IN NS ns
@ IN MX 10 mail
ns IN A 127.0.0.1
mail IN A 192.0.2.25
www IN A 192.0.2.10
www IN A 192.0.2.11
www IN AAAA 2001:db8::10
alias IN CNAME www
chain IN CNAME alias
big IN TXT "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
`})
	dir := filepath.Join("testdata", "replies")
	os.MkdirAll(dir, 0o755)
	for _, c := range []struct {
		file  string
		name  string
		qtype uint16
		edns  bool
	}{
		{"a-two-records", "www.example.com.", dns.TypeA, false},
		{"a-edns-do", "www.example.com.", dns.TypeA, true},
		{"aaaa", "www.example.com.", dns.TypeAAAA, true},
		{"nodata-soa", "www.example.com.", dns.TypeMX, true},
		{"nxdomain-soa", "nx.example.com.", dns.TypeA, true},
		{"cname-chain", "chain.example.com.", dns.TypeA, false},
		{"mx-additional", "example.com.", dns.TypeMX, false},
		{"ns-glue", "example.com.", dns.TypeNS, true},
		{"txt-truncated", "big.example.com.", dns.TypeTXT, false},
		{"refused-other-zone", "www.example.org.", dns.TypeA, false},
	} {
		q := new(dns.Msg)
		q.SetQuestion(c.name, c.qtype)
		if c.edns {
			q.SetEdns0(1232, true)
		}
		raw, _ := q.Pack()
		conn, err := net.Dial("udp", server)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		conn.Write(raw)
		buf := make([]byte, 65535)
		n, err := conn.Read(buf)
		conn.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.file+".bin"), buf[:n], 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
