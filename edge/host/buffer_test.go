package host

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

// The host keeps the address of the module's buffer and asks for it
// again only when an input or a result is longer than it knows the buffer
// to be (abi.ExportBuffer). Here one poll's input (1 500 questions held
// back behind a call under way) and its result (their 1 500 local
// answers) are each larger than the 64 KiB the host starts with: the
// buffer moves, and every answer must still be its own question's; so
// must the questions asked after it, by dohfwd_ask and by a poll.
func TestWazeroBufferMovesWhenOutgrown(t *testing.T) {
	t.Parallel()
	const n = 1500
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := startEdge(t, edgeConfig(up), 1)
	in := e.pool.all[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(name string) error {
		m, err := ask(ctx, e.pool, name)
		if err != nil {
			return err
		}
		if len(m.Answer) != 1 || m.Answer[0].Header().Name != name || m.Answer[0].(*dns.A).A.String() != "127.0.0.1" {
			return fmt.Errorf("%s: want its A 127.0.0.1, got\n%v", name, m)
		}
		return nil
	}

	in.calling.Lock() // the questions queue up for one poll
	at, size := in.bufAt, in.bufSize
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := check(fmt.Sprintf("a-label-long-enough-to-fill-the-buffer-%04d.localhost.", i)); err != nil {
				errs <- err
			}
		})
	}
	for queued := 0; queued < n; {
		time.Sleep(time.Millisecond)
		in.mu.Lock()
		queued = len(in.calls)
		in.mu.Unlock()
	}
	in.calling.Unlock()
	in.kick()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	in.calling.Lock()
	moved := in.bufAt != at && in.bufSize > size
	in.calling.Unlock()
	if !moved {
		t.Fatalf("the buffer stayed at %#x (%d bytes known): the test did not outgrow it", at, size)
	}
	for i := range 3 {
		if err := check(fmt.Sprintf("after-%d.localhost.", i)); err != nil {
			t.Fatal(err)
		}
	}
	e.setAsk(t, false)
	if err := check("by-a-poll.localhost."); err != nil {
		t.Fatal(err)
	}
}
