package rawtcp

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// pair returns a connection accepted by ln (wrapped as the listener
// wraps it) and its client side.
func pair(t *testing.T, wrap bool) (server, client net.Conn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ln := raw
	if wrap {
		ln = Listen(raw)
	}
	client, err = net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// outcome is what a step did, in the terms a caller tests: bytes, and
// the error's class rather than its text.
type outcome struct {
	data                          string
	n                             int
	eof, timeout, closed, errored bool
	op                            string
}

func outcomeOf(n int, b []byte, err error) outcome {
	o := outcome{n: n, data: string(b[:max(n, 0)])}
	var ne net.Error
	var oe *net.OpError
	o.eof = errors.Is(err, io.EOF)
	o.timeout = errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
	o.closed = errors.Is(err, net.ErrClosed)
	o.errored = err != nil
	if errors.As(err, &oe) {
		o.op = oe.Op + "/" + oe.Net
	}
	return o
}

// script runs the same steps on the server side of a connection and
// reports what each did: the differential test runs it on a
// *net.TCPConn and on a Conn.
func script(t *testing.T, wrap bool, seed uint64) []outcome {
	server, client := pair(t, wrap)
	if _, ok := server.(*Conn); ok != (wrap && runtime.GOOS == "linux") {
		t.Fatalf("server conn is %T", server)
	}
	var out []outcome
	rng := rand.New(rand.NewPCG(seed, 1))
	buf := make([]byte, 64<<10)
	// Echo: the client sends pieces of random sizes, the server reads
	// what came and writes it back.
	for range 20 {
		msg := make([]byte, 1+rng.IntN(3000))
		for i := range msg {
			msg[i] = byte(rng.Uint32())
		}
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < len(msg) {
			n, err := server.Read(buf[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		out = append(out, outcomeOf(got, buf, nil))
		n, err := server.Write(buf[:got])
		out = append(out, outcomeOf(n, buf, err))
		echo := make([]byte, got)
		if _, err := io.ReadFull(client, echo); err != nil || !bytes.Equal(echo, msg) {
			t.Fatalf("echo: %v, equal %v", err, bytes.Equal(echo, msg))
		}
	}
	// A write far larger than the socket buffers waits for the reader.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(big))))
		done <- b
	}()
	n, err := server.Write(big)
	out = append(out, outcome{n: n, errored: err != nil})
	if got := <-done; !bytes.Equal(got, big) {
		t.Fatalf("big write: %d bytes came, want %d", len(got), len(big))
	}
	// A read deadline that passes.
	server.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	n, err = server.Read(buf)
	out = append(out, outcomeOf(n, buf, err))
	server.SetReadDeadline(time.Time{})
	// A write deadline that passes while the client does not read.
	huge := bytes.Repeat(big, 16) // 64 MiB: more than loopback's buffers hold
	server.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	n, err = server.Write(huge)
	o := outcomeOf(0, buf, err) // how much went before the deadline varies
	out = append(out, o)
	if n >= len(huge) {
		t.Errorf("a %d-byte write to a client that reads nothing completed", len(huge))
	}
	// The client closes: what it sent is read, then EOF.
	sc := server
	server2, client2 := pair(t, wrap)
	sc.Close()
	client2.Write([]byte("bye"))
	client2.Close()
	n, err = io.ReadFull(server2, buf[:3])
	out = append(out, outcomeOf(n, buf, err))
	n, err = server2.Read(buf)
	out = append(out, outcomeOf(n, buf, err))
	// Reads and writes after the server's own Close.
	server2.Close()
	n, err = server2.Read(buf)
	out = append(out, outcomeOf(n, buf, err))
	n, err = server2.Write([]byte("x"))
	out = append(out, outcomeOf(n, buf, err))
	// A reset by the client: a write meets ECONNRESET or EPIPE.
	server3, client3 := pair(t, wrap)
	client3.(*net.TCPConn).SetLinger(0)
	client3.Close()
	time.Sleep(20 * time.Millisecond)
	var werr error
	for range 10 {
		if _, werr = server3.Write([]byte("late")); werr != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	o = outcomeOf(0, buf, werr)
	o.data = ""
	if errors.Is(werr, syscall.ECONNRESET) || errors.Is(werr, syscall.EPIPE) {
		o.data = "reset"
	}
	out = append(out, o)
	_, rerr := server3.Read(buf)
	out = append(out, outcomeOf(0, buf, rerr))
	return out
}

// TestSameAsTCPConn: a Conn reads, writes, waits, times out, ends and
// fails as the *net.TCPConn it wraps does, step for step, over real
// loopback connections (a differential test against the ordinary path).
func TestSameAsTCPConn(t *testing.T) {
	for seed := range uint64(3) {
		plain := script(t, false, seed)
		raw := script(t, true, seed)
		if len(plain) != len(raw) {
			t.Fatalf("%d steps against %d", len(plain), len(raw))
		}
		for i := range plain {
			if plain[i] != raw[i] {
				t.Errorf("seed %d step %d: net.TCPConn %+v, rawtcp.Conn %+v", seed, i, plain[i], raw[i])
			}
		}
	}
}

// TestConcurrentReadWrite: one goroutine reads while another writes, as
// the HTTP/2 server's reader and its writers do, under the race detector.
func TestConcurrentReadWrite(t *testing.T) {
	server, client := pair(t, true)
	go io.Copy(client, client) // the client echoes
	const n = 2000
	go func() {
		for i := range n {
			if _, err := server.Write([]byte{byte(i), byte(i >> 8)}); err != nil {
				return
			}
		}
	}()
	got := make([]byte, 0, 2*n)
	buf := make([]byte, 512)
	for len(got) < 2*n {
		k, err := server.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:k]...)
	}
	for i := range n {
		if got[2*i] != byte(i) || got[2*i+1] != byte(i>>8) {
			t.Fatalf("byte pair %d out of order", i)
		}
	}
}

// TestWrapLeavesOthers: only a *net.TCPConn is wrapped; TCP returns it.
func TestWrapLeavesOthers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Error("a net.Pipe conn was wrapped")
	}
	server, _ := pair(t, true)
	c, ok := server.(*Conn)
	if !ok {
		t.Skipf("no raw calls on %s", runtime.GOOS)
	}
	if c.TCP() == nil || c.TCP().RemoteAddr().String() != server.RemoteAddr().String() {
		t.Error("TCP does not return the wrapped connection")
	}
}
