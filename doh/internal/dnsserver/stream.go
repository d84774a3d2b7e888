package dnsserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// stream is one TCP or DoT connection: a reader that frames queries, and a
// goroutine per question that writes its answer when it is ready.
type stream struct {
	s      *Server
	raw    net.Conn        // the TCP connection: other goroutines close it
	conn   net.Conn        // raw, or TLS over it once the handshake is done
	ctx    context.Context // ends when the connection is given up
	cancel context.CancelFunc

	slots   chan struct{} // one per open question, MaxInFlight of them
	open    sync.WaitGroup
	waiting atomic.Bool // the reader waits for a new query

	wmu sync.Mutex // one answer written at a time
}

// newStream registers c; nil when the server is closing.
func (s *Server) newStream(c net.Conn) *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if s.closing {
		return nil
	}
	st := &stream{s: s, raw: c, conn: c, slots: make(chan struct{}, s.limits.MaxInFlight)}
	st.ctx, st.cancel = context.WithCancel(context.Background())
	s.conns[st] = struct{}{}
	s.serving.Add(1)
	return st
}

// wake ends an idle reader's wait at shutdown.
func (st *stream) wake() {
	if st.waiting.Load() {
		st.raw.SetReadDeadline(time.Now())
	}
}

func (st *stream) closing() bool {
	select {
	case <-st.s.done:
		return true
	default:
		return false
	}
}

// serve reads queries until the client is done, idle, or sends something
// that is not a query. A client that is done (EOF, or the server shutting
// down) gets the answers it is owed first; one that broke the rules does
// not.
func (st *stream) serve() {
	graceful := st.read()
	if graceful {
		st.open.Wait()
	}
	st.cancel()
	st.conn.Close()
	st.open.Wait()
	st.s.mu.Lock()
	delete(st.s.conns, st)
	st.s.mu.Unlock()
	st.s.serving.Done()
}

// read frames queries; it reports whether the stream ended gracefully.
func (st *stream) read() (graceful bool) {
	l := &st.s.limits
	if cfg := st.s.tlsConfig; cfg != nil {
		tc := tls.Server(st.conn, cfg)
		ctx, cancel := context.WithTimeout(st.ctx, l.ReadTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			st.drop("TLS handshake: " + err.Error())
			return false
		}
		st.conn = tc
	}
	br := bufio.NewReaderSize(st.conn, 2048)
	var prefix [2]byte
	var client netip.Addr // the peer, read at the first query
	for {
		// Wait for the next query, as long as answers are owed or the
		// connection is not idle for too long.
		st.waiting.Store(true)
		st.conn.SetReadDeadline(time.Now().Add(l.IdleTimeout))
		if st.closing() {
			return true
		}
		_, err := br.Peek(1)
		st.waiting.Store(false)
		if err != nil {
			if isTimeout(err) && !st.closing() && len(st.slots) > 0 {
				continue // idle, but answers are still on their way
			}
			return isTimeout(err) || errors.Is(err, io.EOF)
		}
		// The query has begun: it must arrive whole within ReadTimeout.
		st.conn.SetReadDeadline(time.Now().Add(l.ReadTimeout))
		if _, err := io.ReadFull(br, prefix[:]); err != nil {
			st.dropRead(err)
			return false
		}
		n := int(binary.BigEndian.Uint16(prefix[:]))
		if n < headerSize || n > l.MaxQuerySize {
			st.drop("length " + strconv.Itoa(n) + " outside 12 to " + strconv.Itoa(l.MaxQuerySize))
			return false
		}
		raw := make([]byte, n)
		if _, err := io.ReadFull(br, raw); err != nil {
			st.dropRead(err)
			return false
		}
		var received time.Time // for the wiretap only
		if st.s.Wiretap != nil {
			received = time.Now()
		}
		q, reply, err := checkQuery(raw)
		if err != nil {
			st.drop(err.Error())
			return false
		}
		if reply != nil {
			if !st.write(reply, q, raw, received) {
				return false
			}
			continue
		}
		select {
		case st.slots <- struct{}{}:
		case <-st.ctx.Done():
			return false
		}
		if !client.IsValid() {
			client = clientOf(st.raw.RemoteAddr())
		}
		st.open.Add(1)
		st.s.inFlight.Add(1)
		go func() {
			defer func() { st.s.inFlight.Add(-1); <-st.slots; st.open.Done() }()
			reply := st.s.resolve(st.ctx, q, client)
			if st.ctx.Err() != nil {
				st.tap(raw, received, nil) // given up: no answer
			} else if !st.write(reply, q, raw, received) {
				st.abort()
			}
		}()
	}
}

// drop reports why the stream is closed.
func (st *stream) drop(reason string) {
	if f := st.s.OnDrop; f != nil {
		f(st.raw.RemoteAddr(), reason)
	}
}

// dropRead reports a query that did not arrive whole.
func (st *stream) dropRead(err error) {
	if isTimeout(err) {
		st.drop("query stalled past the read timeout")
	} else if !st.closing() {
		st.drop("query cut short: " + err.Error())
	}
}

// abort gives the connection up: questions still open are cancelled.
func (st *stream) abort() {
	st.cancel()
	st.raw.Close()
}

// write sends one framed answer to q (raw, received at received); it
// reports false when the connection failed.
func (st *stream) write(reply, q *dns.Msg, raw []byte, received time.Time) bool {
	bp := frames.Get().(*[]byte)
	defer frames.Put(bp)
	frame := frameReply(bp, reply, q)
	st.wmu.Lock()
	st.conn.SetWriteDeadline(time.Now().Add(st.s.limits.WriteTimeout))
	_, err := st.conn.Write(frame)
	st.wmu.Unlock()
	if err != nil {
		frame = nil
	}
	if st.s.Wiretap != nil {
		st.tap(raw, received, frame)
	}
	return err == nil
}

// tap hands the wiretap one question of the stream and its framed answer
// (nil: none was sent).
func (st *stream) tap(query []byte, received time.Time, frame []byte) {
	if st.s.Wiretap == nil {
		return
	}
	var reply []byte
	if len(frame) > 2 {
		reply = frame[2:]
	}
	p := wiretap.TCP
	if st.s.tlsConfig != nil {
		p = wiretap.DoT
	}
	wiretap.Client(st.s.Wiretap, p, wiretap.AddrPort(st.raw.RemoteAddr()), wiretap.AddrPort(st.raw.LocalAddr()), query, received, reply, time.Now())
}

// frameReply packs reply to q with its two-byte length before it (RFC
// 1035 section 4.2.2, RFC 9250 section 4.2), into *bp's buffer when it
// fits, so that the frame goes out in one write (one TLS record, one
// QUIC frame); a SERVFAIL when reply does not pack. *bp keeps the buffer,
// grown, up to 16 KiB.
func frameReply(bp *[]byte, reply, q *dns.Msg) []byte {
	buf := (*bp)[:cap(*bp)]
	wire, err := packReply(reply, q, 0, buf[2:])
	if err != nil {
		wire, _ = packReply(errorReplyTo(q, dns.RcodeServerFailure), q, 0, buf[2:])
	}
	var frame []byte
	if len(wire) <= len(buf)-2 && &buf[2] == &wire[0] {
		frame = buf[:2+len(wire)]
	} else { // the answer outgrew the buffer
		frame = append(make([]byte, 2, 2+len(wire)), wire...)
	}
	binary.BigEndian.PutUint16(frame, uint16(len(wire)))
	if cap(frame) <= 16<<10 {
		*bp = frame[:0]
	}
	return frame
}

// frames are the write buffers of answers.
var frames = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
