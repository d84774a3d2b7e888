package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// The process goes back to rest after a load: once 200 HTTP/2 clients
// that asked cache misses of a good server (nsd), a flapping one (answers,
// drops, truncates, SERVFAIL in turn) and a closed port have gone, its
// descriptors and goroutines come back within 10 of what it held before
// the load. /status shows the pooled upstream sockets while they are held.

const (
	restClients = 200
	restLoad    = 6 * time.Second
	// restSlack is what the process may hold at rest above its baseline.
	restSlack = 10
	// restGiveUp bounds the wait for rest: the pools' idle expiry and
	// the kept workers' are well inside it.
	restGiveUp = 45 * time.Second
)

func TestBackToRestAfterLoad(t *testing.T) {
	pki := newPKI(t)
	good := startNSD(t)
	flap := upstreamtest.Start(t, flapping(250*time.Millisecond))
	closed := upstreamtest.ClosedPort(t)
	d := startDohfwd(t, fmt.Sprintf(`listen:
  https: 127.0.0.1:0
  admin: 127.0.0.1:0
engine:
  transaction_timeout: 400ms
  demotion_period: 1s
scopes:
  - name: good
    domains: [e2e.test]
    servers: [%s]
  - name: flap
    domains: [flap.test]
    servers: [%s]
  - name: closed
    domains: [closed.test]
    servers: [%s]
  - name: mixed
    default_route: true
    servers: [%s, %s, %s]
fallback_servers: [127.0.0.1:1]
log:
  format: json
`, good, flap, closed, closed, flap, good), pki)

	admin := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	baseFDs, baseG := d.openFDs(), d.restStatus(admin).Goroutines
	t.Logf("baseline: %d descriptors, %d goroutines", baseFDs, baseG)

	var answered, failed atomic.Int64
	stop := time.Now().Add(restLoad)
	var wg sync.WaitGroup
	for c := range restClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.Pool}, ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			zones := [...]string{"e2e.test", "flap.test", "closed.test", "mixed.test"}
			for i := 0; time.Now().Before(stop); i++ {
				q := newQuery(fmt.Sprintf("c%d-%d.%s", c, i, zones[(c+i)%len(zones)]), dns.TypeA)
				if restAsk(hc, d.URL(), q) {
					answered.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	held := 0
	for time.Now().Before(stop) {
		time.Sleep(500 * time.Millisecond)
		held = max(held, d.restStatus(admin).UpstreamSockets)
	}
	wg.Wait()
	t.Logf("load: %d answered, %d failed (HTTP or transport) from %d clients; up to %d upstream sockets pooled",
		answered.Load(), failed.Load(), restClients, held)
	if answered.Load() < restClients {
		t.Fatalf("the load got %d answers: it did not reach the servers", answered.Load())
	}
	if held == 0 {
		t.Errorf("/status upstream_sockets stayed 0 under load: the held sockets are not shown")
	}

	var fds int
	var st restStatus
	ended := time.Now()
	for give := ended.Add(restGiveUp); ; {
		time.Sleep(time.Second)
		fds, st = d.openFDs(), d.restStatus(admin)
		if fds <= baseFDs+restSlack && st.Goroutines <= baseG+restSlack {
			break
		}
		if time.Now().After(give) {
			t.Fatalf("not at rest %v after the load: %d descriptors (baseline %d), %d goroutines (baseline %d), %d upstream sockets pooled",
				restGiveUp, fds, baseFDs, st.Goroutines, baseG, st.UpstreamSockets)
		}
	}
	t.Logf("at rest %v after the load: %d descriptors, %d goroutines, %d upstream sockets pooled",
		time.Since(ended).Round(time.Second), fds, st.Goroutines, st.UpstreamSockets)
}

// flapping is a server that, in turns of period, answers, drops,
// truncates over UDP (answering over TCP) and answers SERVFAIL.
func flapping(period time.Duration) upstreamtest.Handler {
	answer := upstreamtest.Answer("@ 60 IN A 192.0.2.7")
	turns := []upstreamtest.Handler{
		answer,
		upstreamtest.Drop(),
		upstreamtest.ByTransport(upstreamtest.Truncated(), answer),
		upstreamtest.Rcode(dns.RcodeServerFailure),
	}
	start := time.Now()
	return func(q upstreamtest.Query) upstreamtest.Action {
		return turns[int(time.Since(start)/period)%len(turns)](q)
	}
}

// restAsk posts q and reports whether a DNS message came back.
func restAsk(c *http.Client, url string, q *dns.Msg) bool {
	wire, _ := q.Pack()
	res, err := c.Post(url, "application/dns-message", bytes.NewReader(wire))
	if err != nil {
		return false
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode == http.StatusOK && new(dns.Msg).Unpack(body) == nil
}

// openFDs counts the process's open descriptors.
func (d *dohfwd) openFDs() int {
	d.t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	if err != nil {
		d.t.Fatalf("counting descriptors: %v", err)
	}
	return len(ents)
}

// restStatus is what the test reads of /status.
type restStatus struct {
	Goroutines      int `json:"goroutines"`
	OpenFiles       int `json:"open_files"`
	UpstreamSockets int `json:"upstream_sockets"`
}

// restStatus reads /status on a connection that is closed after it, so
// the reading leaves nothing held.
func (d *dohfwd) restStatus(c *http.Client) restStatus {
	d.t.Helper()
	res, err := c.Get("http://" + d.Admin + "/status")
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	var st restStatus
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		d.t.Fatal(err)
	}
	return st
}
