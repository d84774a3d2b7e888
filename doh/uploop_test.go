package doh

import (
	"fmt"
	"sync"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// Many questions at once on one HTTP/2 connection, each a distinct name,
// through the real engine (on Linux its upstream loop finishes them and a
// worker flushes the connection): every one answered, with its own name,
// ID and answer.
func TestH2UpstreamLoopAnswersConcurrentStreams(t *testing.T) {
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.7"))
	e, err := engine.New(engine.Config{FallbackServers: []string{up.String()}, Cache: engine.CacheConfig{MaxEntries: -1}},
		engine.Options{Network: engine.NativeNetwork{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	base, c := startTLS(t, NewHandler(e, Options{}), Limits{})
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("q%d.example.test.", i)
			q := query(t, name, dns.TypeA, uint16(i+1))
			resp, body := do(t, c, newRequest(t, "POST", base+DefaultPath, pack(t, q), "Content-Type", MediaTypeDNS))
			m := new(dns.Msg)
			if resp.StatusCode != 200 || m.Unpack(body) != nil {
				errs <- fmt.Errorf("%s: status %d", name, resp.StatusCode)
				return
			}
			if m.Id != uint16(i+1) || m.Question[0].Name != name || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.7" {
				errs <- fmt.Errorf("%s: got %v", name, m)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := len(up.Queries()); got != n {
		t.Errorf("upstream read %d queries, want %d", got, n)
	}
}
