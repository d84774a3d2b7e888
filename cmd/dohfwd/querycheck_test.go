package main

import (
	"bytes"
	"crypto/tls"
	be "encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// One query check: every front end of the built binary (DoH in the wire
// form over HTTP/2, the JSON form and the admin /explain through curl,
// Do53 over UDP and TCP, DoT, DoQ) gives each question the same verdict,
// dnswire.CheckQuery's: accepted (resolved: NOERROR or NXDOMAIN from nsd),
// refused with a DNS error, or unreadable (DoH 400; Do53 and DoT do not
// answer a question that does not read; /explain 400). A question given
// in text (JSON, /explain) reads by dnswire.ParseQuestion.
func TestOneQueryCheckEveryFrontEnd(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(scopeYAML(startNSD(t)), "listen:\n", "listen:\n  dot: 127.0.0.1:0\n  dns: 127.0.0.1:0\n", 1)
	d, doq := startDoQ(t, yaml)
	dot, udp, tcp := d.listenerAddr("dot"), d.listenerAddr("dns-udp"), d.listenerAddr("dns-tcp")
	client := d.client()

	// long is a name under e2e.test of n characters without the final dot.
	long := func(n int) string {
		var b strings.Builder
		for b.Len() < n-len(".e2e.test") {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(strings.Repeat("a", min(63, n-len(".e2e.test")-b.Len())))
		}
		return b.String() + ".e2e.test"
	}
	const (
		accepted = -1
		unread   = -2
	)
	cases := []struct {
		name, qtype string
		wireType    uint16 // 0: the question has no wire form of its own
		want        int    // an rcode (refused), accepted or unread
	}{
		{"www.e2e.test", "A", dns.TypeA, accepted},
		{"v6.e2e.test", "AAAA", dns.TypeAAAA, accepted},
		{"v6.e2e.test", "TYPE28", dns.TypeAAAA, accepted},
		{"v6.e2e.test", "28", dns.TypeAAAA, accepted},
		{"www.e2e.test", "type65280", 65280, accepted},
		{long(253), "A", dns.TypeA, accepted},
		{"www.e2e.test", "AXFR", dns.TypeAXFR, dns.RcodeNotImplemented},
		{"www.e2e.test", "ixfr", dns.TypeIXFR, dns.RcodeNotImplemented},
		{"www.e2e.test", "MAILA", dns.TypeMAILA, dns.RcodeNotImplemented},
		{"www.e2e.test", "254", dns.TypeMAILA, dns.RcodeNotImplemented},
		{"www.e2e.test", "MAILB", dns.TypeMAILB, dns.RcodeNotImplemented},
		{"www.e2e.test", "OPT", dns.TypeOPT, dns.RcodeFormatError},
		{"www.e2e.test", "TYPE250", dns.TypeTSIG, dns.RcodeFormatError},
		{"www.e2e.test", "TKEY", dns.TypeTKEY, dns.RcodeFormatError},
		{long(254), "A", dns.TypeA, unread}, // 256 octets on the wire
		{"a..e2e.test", "A", 0, unread},
		{"www.e2e.test", "NOPE", 0, unread},
		{"www.e2e.test", "TYPE0", 0, unread},
		{"www.e2e.test", "65536", 0, unread},
	}
	verdict := func(want int) string {
		switch want {
		case accepted:
			return "accepted"
		case unread:
			return "unreadable"
		}
		return "refused " + dns.RcodeToString[want]
	}
	for i, tc := range cases {
		label := tc.name[:min(len(tc.name), 20)] + "/" + tc.qtype
		var wire []byte
		if tc.wireType != 0 {
			wire = rawQuery(uint16(i+1), tc.name, tc.wireType)
		}
		check := func(front, got string) {
			t.Helper()
			if got != verdict(tc.want) {
				t.Errorf("%s %s: %s, want %s", front, label, got, verdict(tc.want))
			}
		}

		// The text forms, through curl.
		v := url.Values{"name": {tc.name}, "type": {tc.qtype}}.Encode()
		code, body := curlGet(t, "--cacert", d.pki.CA, "https://"+d.HTTPS+"/resolve?"+v)
		check("JSON", httpVerdict(code, body, "Status"))
		code, body = curlGet(t, "http://"+d.Admin+"/explain?"+v)
		check("/explain", explainVerdict(code, body))

		if wire == nil {
			continue
		}
		res, err := client.Post(d.URL(), "application/dns-message", bytes.NewReader(wire))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		check("DoH", wireVerdict(res.StatusCode, b))

		for _, front := range []struct {
			name string
			dial func() (net.Conn, error)
		}{
			{"Do53/TCP", func() (net.Conn, error) { return net.Dial("tcp", tcp) }},
			{"DoT", func() (net.Conn, error) {
				return tls.Dial("tcp", dot, &tls.Config{RootCAs: d.pki.Pool, ServerName: "localhost", NextProtos: []string{"dot"}})
			}},
		} {
			c, err := front.dial()
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			c.Write(be.BigEndian.AppendUint16(nil, uint16(len(wire))))
			c.Write(wire)
			got, err := readFramed(c)
			c.Close()
			if errors.Is(err, io.EOF) {
				check(front.name, "unreadable") // closed without an answer
				continue
			}
			if err != nil {
				t.Fatalf("%s %s: %v", front.name, label, err)
			}
			check(front.name, wireVerdict(200, got))
		}

		// DoQ: ID 0 on a stream of its own; a question that does not
		// read closes the connection (DOQ_PROTOCOL_ERROR), no answer.
		doqWire := append([]byte{0, 0}, wire[2:]...)
		st, err := dialDoQ(t, d, doq).OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		st.SetDeadline(time.Now().Add(20 * time.Second))
		st.Write(be.BigEndian.AppendUint16(nil, uint16(len(doqWire))))
		st.Write(doqWire)
		st.Close()
		if b, err := io.ReadAll(st); err != nil || len(b) < 2 {
			check("DoQ", "unreadable")
		} else {
			check("DoQ", wireVerdict(200, b[2:]))
		}

		if tc.want != unread { // UDP's "no answer" is a wait: the TCP row covers it
			c, err := net.Dial("udp", udp)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			c.Write(wire)
			buf := make([]byte, 65535)
			n, err := c.Read(buf)
			c.Close()
			if err != nil {
				t.Fatalf("Do53/UDP %s: %v", label, err)
			}
			check("Do53/UDP", wireVerdict(200, buf[:n]))
		}
	}
}

// rawQuery is a query for name (fully qualified here) and qtype, RD set,
// written byte by byte: a name longer than 255 octets is sent as it is.
func rawQuery(id uint16, name string, qtype uint16) []byte {
	b := be.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0) // RD, QDCOUNT 1
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = append(b, 0)
	b = be.BigEndian.AppendUint16(b, qtype)
	return be.BigEndian.AppendUint16(b, dns.ClassINET)
}

// readFramed reads one length-prefixed DNS message from a stream.
func readFramed(c net.Conn) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, be.BigEndian.Uint16(n[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

// wireVerdict reads a wire answer (status 200) or its absence (400).
func wireVerdict(status int, body []byte) string {
	if status == http.StatusBadRequest {
		return "unreadable"
	}
	m := new(dns.Msg)
	if status != http.StatusOK || m.Unpack(body) != nil {
		return "HTTP " + strconv.Itoa(status) + " " + strconv.Quote(string(body))
	}
	return rcodeVerdict(m.Rcode)
}

func rcodeVerdict(rcode int) string {
	if rcode == dns.RcodeSuccess || rcode == dns.RcodeNameError {
		return "accepted"
	}
	return "refused " + dns.RcodeToString[rcode]
}

// httpVerdict reads a JSON DoH answer: 400, or 200 with the rcode in key.
func httpVerdict(status int, body []byte, key string) string {
	if status == http.StatusBadRequest {
		return "unreadable"
	}
	var j map[string]any
	if status != http.StatusOK || json.Unmarshal(body, &j) != nil {
		return "HTTP " + strconv.Itoa(status) + " " + strconv.Quote(string(body))
	}
	rcode, _ := j[key].(float64)
	return rcodeVerdict(int(rcode))
}

// explainVerdict reads /explain's answer: 200 explains an accepted
// question, 400 says why a question is refused or unreadable.
func explainVerdict(status int, body []byte) string {
	if status == http.StatusOK {
		return "accepted"
	}
	var j map[string]string
	if status != http.StatusBadRequest || json.Unmarshal(body, &j) != nil {
		return "HTTP " + strconv.Itoa(status) + " " + strconv.Quote(string(body))
	}
	switch j["verdict"] {
	case dnswire.Refused.String():
		return "refused " + j["rcode"]
	case dnswire.Unreadable.String():
		return "unreadable"
	}
	return "400 without a verdict: " + strconv.Quote(string(body))
}

// curlGet runs curl on url and returns the HTTP status and the body.
func curlGet(t *testing.T, args ...string) (int, []byte) {
	t.Helper()
	out := runTool(t, "curl", append([]string{"-sS", "--max-time", "20", "-w", "\n%{http_code}"}, args...)...)
	i := strings.LastIndexByte(out, '\n')
	code, err := strconv.Atoi(out[i+1:])
	if err != nil {
		t.Fatalf("curl %v: no status in %q", args, out)
	}
	return code, []byte(out[:i])
}
