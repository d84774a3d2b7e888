//go:build !wasip1

package doh

import (
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// dialRawWith opens an h2c connection and sends the preface, settings
// and what write adds, all in one write: the server reads them in one
// batch.
func dialRawWith(t testing.TB, addr string, write func(c *rawClient)) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &rawClient{t: t, nc: nc}
	c.fr = http2.NewFramer(&c.out, nc)
	c.fr.AllowIllegalWrites = true
	c.fr.SetMaxReadFrameSize(1 << 20)
	c.enc = hpack.NewEncoder(&c.blk)
	c.out.WriteString(http2.ClientPreface)
	c.fr.WriteSettings()
	write(c)
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestWaitingStreamsKeepTheConnection: streams that wait on the resolver
// longer than every timeout of the connection (header, read, write and
// idle) are all answered, and the connection stays open. Only a client
// that stalls a header block, a body or flow control loses it. Every
// request comes whole with the preface in one write, so no read batch
// ends with a request half read: the deadline the preface was read under
// (the header timeout) must be lifted all the same.
func TestWaitingStreamsKeepTheConnection(t *testing.T) {
	t.Parallel()
	const n, timeout = 20, 200 * time.Millisecond
	res := &blockingResolver{release: make(chan struct{})}
	addr, _ := startPlainLimits(t, NewHandler(res, Options{}),
		Limits{ReadHeaderTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, IdleTimeout: timeout})
	c := dialRawWith(t, addr, func(c *rawClient) {
		for i := range n {
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1),
				BlockFragment: c.block(getPath(t, fmt.Sprintf("w%d.example.", i))), EndStream: true, EndHeaders: true})
		}
	})
	waitFor(t, "the questions to reach the resolver", func() bool { return res.calls.Load() == n })
	time.Sleep(5 * timeout) // every timeout passes while they wait
	close(res.release)
	answered := map[uint32]bool{}
	ga, err := c.readUntil(10*time.Second, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok && d.StreamEnded() {
			answered[d.StreamID] = true
		}
		return len(answered) == n
	})
	if ga != nil || err != nil {
		t.Fatalf("after %d of %d answers: GOAWAY %v, %v", len(answered), n, ga, err)
	}
	// The connection is still there for the next question.
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 2*n + 1, BlockFragment: c.block(getPath(t, "next.example.")), EndStream: true, EndHeaders: true})
	c.flush()
	ga, err = c.readUntil(10*time.Second, func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 2*n+1 && d.StreamEnded()
	})
	if ga != nil || err != nil {
		t.Fatalf("the next question: GOAWAY %v, %v", ga, err)
	}
}
