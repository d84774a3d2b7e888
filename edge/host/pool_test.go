package host

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// A status read (a /metrics scrape) takes no instance away from requests:
// it answers while a question is in flight, with the busy instance's last
// status, and the busy instance catches up when its call ends.
func TestWazeroStatusDoesNotWaitForBusyInstance(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	answer := upstreamtest.Answer("@ 60 IN A 192.0.2.7")
	s := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		close(arrived)
		<-release
		return answer(q)
	})
	e := startEdge(t, edgeConfig(s), 2)
	ctx := context.Background()
	if st, err := e.pool.Statuses(ctx); err != nil || len(st) != 2 {
		t.Fatalf("idle pool: %d statuses, %v; want 2", len(st), err)
	}

	wire, _ := query("busy.example.org", dns.TypeA).Pack()
	url := e.url + "/dns-query?dns=" + base64.RawURLEncoding.EncodeToString(wire)
	done := make(chan error, 1)
	go func() {
		resp, err := e.client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		done <- err
	}()
	<-arrived // one instance is now inside its question
	quick, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	st, err := e.pool.Statuses(quick)
	cancel()
	close(release)
	if err != nil || len(st) != 2 {
		t.Fatalf("with a question in flight: %d statuses, %v; want 2 at once", len(st), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the question in flight: %v", err)
	}

	total := e.pool.Status().Counters.Questions["answer"]
	if total != 1 {
		t.Fatalf("after the question: %d answered questions, want 1", total)
	}
}
