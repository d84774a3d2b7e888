package main

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/http2"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// HTTP/2 under load, through the binary with Go's http2 client: a
// question that waits on the network never costs its connection.

// oneConnClient is Go's HTTP/2 client on one connection to d: h2c on
// the plaintext listener, or h2 over TLS. Requests past the server's
// SETTINGS_MAX_CONCURRENT_STREAMS wait on that connection for a stream;
// none opens another. A ClientConn of its own, not the Transport's pool:
// the pool's reservations count as open streams, so requests past the
// limit would wait until the connection ends.
//
// With held, what the client writes in its first 200 ms reaches the
// server in one write (heldConn): the preface, its SETTINGS and the first
// requests come in one read, as they do when a busy server gets to a new
// connection late. It returns the DoH URL it asks.
func (d *dohfwd) oneConnClient(overTLS, held bool) (c *http.Client, url string) {
	d.t.Helper()
	var nc net.Conn
	var err error
	if overTLS {
		url = d.URL()
		nc, err = net.Dial("tcp", d.HTTPS)
	} else {
		url = "http://" + d.HTTP + "/dns-query"
		nc, err = net.Dial("tcp", d.HTTP)
	}
	if err != nil {
		d.t.Fatal(err)
	}
	if overTLS {
		tc := tls.Client(nc, &tls.Config{RootCAs: d.pki.Pool, ServerName: "localhost", NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil {
			d.t.Fatal(err)
		}
		nc = tc
	}
	if held {
		hc := &heldConn{Conn: nc}
		hc.hold(200 * time.Millisecond)
		nc = hc
	}
	cc, err := (&http2.Transport{StrictMaxConcurrentStreams: true}).NewClientConn(nc)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { cc.Close() })
	return &http.Client{Transport: cc}, url
}

// heldConn keeps what is written during a hold and writes it in one
// piece when the hold ends (over TLS: in records as full as they go).
type heldConn struct {
	net.Conn
	mu      sync.Mutex
	holding bool
	held    []byte
}

func (c *heldConn) hold(d time.Duration) {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
	time.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.holding = false
		c.Conn.Write(c.held)
	})
}

func (c *heldConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.held = append(c.held, b...)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// dohOutcome is what a DoH client got: the HTTP status and DNS rcode, or
// the error.
type dohOutcome struct {
	status int
	msg    *dns.Msg
	err    error
}

func (o dohOutcome) String() string {
	switch {
	case o.err != nil:
		return "error"
	case o.msg == nil:
		return fmt.Sprintf("%d (not DNS)", o.status)
	}
	return fmt.Sprintf("%d %s", o.status, dns.RcodeToString[o.msg.Rcode])
}

// ask asks url for q by POST, or by GET, and reads the answer.
func ask(c *http.Client, url string, q *dns.Msg, get bool) dohOutcome {
	wire, err := q.Pack()
	if err != nil {
		return dohOutcome{err: err}
	}
	var res *http.Response
	if get {
		res, err = c.Get(url + "?dns=" + base64.RawURLEncoding.EncodeToString(wire))
	} else {
		res, err = c.Post(url, "application/dns-message", bytes.NewReader(wire))
	}
	if err != nil {
		return dohOutcome{err: err}
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return dohOutcome{status: res.StatusCode, err: err}
	}
	m := new(dns.Msg)
	if m.Unpack(body) != nil {
		m = nil
	}
	return dohOutcome{status: res.StatusCode, msg: m}
}

// askMany asks n distinct questions (qI.<zone>) at once on c and returns
// the count of each outcome once all are answered; answered counts them
// as they come.
func askMany(t *testing.T, c *http.Client, url, zone string, n int, get bool, answered *atomic.Int32) (map[string]int, []error) {
	t.Helper()
	outcomes := make([]dohOutcome, n)
	took := make([]time.Duration, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			outcomes[i] = ask(c, url, newQuery(fmt.Sprintf("q%d.%s", i, zone), dns.TypeA), get)
			took[i] = time.Since(start)
			answered.Add(1)
		})
	}
	wg.Wait()
	bySecond := map[int]int{}
	for _, d := range took {
		bySecond[int(d/time.Second)]++
	}
	t.Logf("answered by second since the first question: %v", bySecond)
	count := map[string]int{}
	var errs []error
	for _, o := range outcomes {
		count[o.String()]++
		if o.err != nil && len(errs) < 5 {
			errs = append(errs, o.err)
		}
	}
	return count, errs
}

// waitInFlight waits until the engine holds n upstream transactions
// (/status in_flight).
func (d *dohfwd) waitInFlight(n int, within time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := int(d.status()["in_flight"].(float64))
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%d upstream transactions in flight, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// One HTTP/2 connection sends 4 096 questions at once to a scope whose
// only server drops every query: each gets its SERVFAIL after its three
// attempts, on that one connection. Meanwhile a 4 097th question is
// refused by the engine's in-flight ceiling and localhost. is answered,
// both before any of the 4 096 is, and upstream_failed rises by exactly
// three for each question.
func TestSlowQuestionsKeepTheirConnection(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[overTLS], func(t *testing.T) {
			t.Parallel()
			const n = 4096
			hole := upstreamtest.Start(t, upstreamtest.Drop())
			// Transactions of 5 s, not 2: the 4 097th question needs all
			// 4 096 holding one at once, and on a loaded 2-core machine
			// sending 8 192 requests (both subtests) may take more than the
			// 6 s that three 2 s attempts leave.
			yaml := strings.Replace(scopeYAML(hole.String()), "listen:\n", "listen:\n  http: 127.0.0.1:0\n", 1) +
				"limits:\n  streams_per_connection: 4096\n"
			yaml = strings.Replace(yaml, "log:\n", "engine:\n  transaction_timeout: 5s\nlog:\n", 1)
			d := startDohfwd(t, yaml, newPKI(t))
			failedBefore := d.metric("dohfwd_upstream_failed_total")
			c, url := d.oneConnClient(overTLS, true)
			other, otherURL := d.oneConnClient(overTLS, false)

			var answered atomic.Int32
			done := make(chan struct{})
			var count map[string]int
			var errs []error
			go func() {
				defer close(done)
				count, errs = askMany(t, c, url, "hole.test", n, false, &answered)
			}()
			// Every question holds its first transaction: one more is
			// over the ceiling, and a local name needs no upstream.
			d.waitInFlight(n, 30*time.Second)
			overQ := newQuery("over.hole.test", dns.TypeA)
			overQ.SetEdns0(1232, false)
			over := ask(other, otherURL, overQ, false)
			local := ask(other, otherURL, newQuery("localhost", dns.TypeA), false)
			early := answered.Load()
			<-done

			if count[fmt.Sprintf("%d SERVFAIL", http.StatusOK)] != n {
				t.Errorf("outcomes %v (errors %v), want %d × 200 SERVFAIL", count, errs, n)
			}
			if early != 0 {
				t.Errorf("%d of the %d were answered before the question over the ceiling and localhost.", early, n)
			}
			if over.String() != "200 SERVFAIL" || !hasEDEText(over.msg, "in-flight ceiling") {
				t.Errorf("the question over the ceiling got %v %v, want SERVFAIL with the in-flight-ceiling EDE", over, over.msg)
			}
			if local.String() != "200 NOERROR" || len(local.msg.Answer) == 0 {
				t.Errorf("localhost. got %v %v", local, local.msg)
			}
			if got := d.metric("dohfwd_upstream_failed_total") - failedBefore; got != 3*n {
				t.Errorf("upstream_failed rose by %v, want %d", got, 3*n)
			}
		})
	}
}

// With the default 250 streams open, each waiting 6 s on its upstream,
// and the client queueing more behind them, every question is answered
// on the one connection. The questions are GETs, the first of them in
// one write with the preface: each request is whole in its HEADERS frame,
// so the server never ends a read with one half read, and only the
// streams waiting on the engine keep the connection.
func TestQueuedStreamsOutwaitSlowUpstream(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[overTLS], func(t *testing.T) {
			t.Parallel()
			const n = 300
			slow := upstreamtest.Start(t, upstreamtest.Delay(6*time.Second, upstreamtest.Answer("@ 60 IN A 192.0.2.6")))
			yaml := strings.Replace(scopeYAML(slow.String()), "listen:\n", "listen:\n  http: 127.0.0.1:0\n", 1)
			yaml = strings.Replace(yaml, "log:\n", "engine:\n  transaction_timeout: 7s\n  attempts: 1\nlog:\n", 1)
			d := startDohfwd(t, yaml, newPKI(t))
			c, url := d.oneConnClient(overTLS, true)
			var answered atomic.Int32
			count, errs := askMany(t, c, url, "slow.test", n, true, &answered)
			if count["200 NOERROR"] != n {
				t.Errorf("outcomes %v (errors %v), want %d × 200 NOERROR", count, errs, n)
			}
		})
	}
}

// hasEDEText reports whether m carries an Extended DNS Error whose text
// contains text.
func hasEDEText(m *dns.Msg, text string) bool {
	if m == nil || m.IsEdns0() == nil {
		return false
	}
	for _, o := range m.IsEdns0().Option {
		if e, ok := o.(*dns.EDNS0_EDE); ok && strings.Contains(e.ExtraText, text) {
			return true
		}
	}
	return false
}
