package dnsserver

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/quic-go/quic-go"

	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// DNS over QUIC error codes (RFC 9250, section 8.4), used to close a
// connection (an application error) or to reset a stream; untyped, since
// quic-go types the two uses apart.
const (
	DoQNoError          = 0x0
	DoQInternalError    = 0x1
	DoQProtocolError    = 0x2
	DoQRequestCancelled = 0x3
	DoQExcessiveLoad    = 0x4
)

// QUICListener is what ServeQUIC accepts connections from
// (quicconf.Listener): connections whose handshake is complete, with ALPN
// "doq" and 0-RTT refused.
type QUICListener interface {
	Accept(context.Context) (*quic.Conn, error)
	// StopAccepting ends Accept; accepted connections go on.
	StopAccepting() error
	// Close ends the listener and every connection it accepted.
	Close() error
	Addr() net.Addr
}

// ServeQUIC serves DNS over QUIC (RFC 9250) on ln: each bidirectional
// stream carries one query, framed with a two-byte length as on TCP, and
// its answer; the client ends the stream after its query (FIN) and the
// server after the answer. A stream with more than one message, a query
// whose ID is not 0, or bytes that are not a DNS query close the
// connection with DOQ_PROTOCOL_ERROR; a stream the client resets is
// cancelled with DOQ_REQUEST_CANCELLED. Queries go through the same
// checks, resolver, client admission and padding (RFC 8467) as DoT's.
// It returns ErrServerClosed after Shutdown or Close.
func (s *Server) ServeQUIC(ln QUICListener) error {
	if !s.trackQUIC(ln, true) {
		ln.Close()
		return ErrServerClosed
	}
	defer s.trackQUIC(ln, false)
	for {
		c, err := ln.Accept(s.stopCtx)
		if err != nil {
			select {
			case <-s.done:
				return ErrServerClosed
			default:
			}
			return err
		}
		client := clientOf(c.RemoteAddr())
		var release func()
		if s.HoldConn != nil {
			r, ok := s.HoldConn(client)
			if !ok {
				s.quicDrop(c, DoQExcessiveLoad, "connection over the connection limits")
				continue
			}
			release = r
		}
		if !s.addQUICConn(c) {
			if release != nil {
				release()
			}
			c.CloseWithError(DoQNoError, "")
			return ErrServerClosed
		}
		go s.serveQUICConn(c, client, release)
	}
}

// trackQUIC adds or removes a QUIC listener; it reports false when the
// server is closing.
func (s *Server) trackQUIC(ln QUICListener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	if add {
		if s.closing {
			return false
		}
		s.quicListeners[ln] = struct{}{}
	} else {
		delete(s.quicListeners, ln)
	}
	return true
}

func (s *Server) addQUICConn(c *quic.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.quicConns[c] = struct{}{}
	s.serving.Add(1)
	return true
}

// serveQUICConn accepts c's streams until the client closes it, it is
// idle (no stream opened and none open) past Limits.IdleTimeout, or the
// server shuts down; then it waits for the answers owed and closes with
// DOQ_NO_ERROR (RFC 9250, section 5.5). The listener's QUIC idle timeout
// is set longer, so that this close, not QUIC's silent one, ends an idle
// connection, unless the client asked for a shorter one.
func (s *Server) serveQUICConn(c *quic.Conn, client netip.Addr, release func()) {
	defer func() {
		s.mu.Lock()
		delete(s.quicConns, c)
		s.mu.Unlock()
		if release != nil {
			release()
		}
		s.serving.Done()
	}()
	ctx, cancel := context.WithCancel(c.Context())
	defer cancel()
	defer context.AfterFunc(s.stopCtx, cancel)()
	var open sync.WaitGroup
	var streams atomic.Int64     // open now
	var lastEnd atomic.Int64     // when the last stream ended, Unix ns
	wait := s.limits.IdleTimeout // until the connection is idle, unless a stream comes
	for {
		actx, stop := context.WithTimeout(ctx, wait)
		st, err := c.AcceptStream(actx)
		stop()
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				break
			}
			// Idle counts from the last answer, which then has had the
			// whole timeout to reach the client.
			wait = s.limits.IdleTimeout
			if streams.Load() == 0 {
				if wait -= time.Since(time.Unix(0, lastEnd.Load())); wait <= 0 {
					break
				}
			}
			continue
		}
		open.Add(1)
		streams.Add(1)
		s.inFlight.Add(1)
		go func() {
			defer func() { lastEnd.Store(time.Now().UnixNano()); s.inFlight.Add(-1); streams.Add(-1); open.Done() }()
			s.serveQUICStream(c, st, client)
		}()
		wait = s.limits.IdleTimeout
	}
	open.Wait()
	if s.stopCtx.Err() != nil {
		s.awaitDelivery(c)
	}
	c.CloseWithError(DoQNoError, "")
}

// awaitDelivery gives the answers just written at shutdown time to reach
// the client before the connection is closed: closing it discards stream
// data not yet sent or acknowledged, and quic-go tells no stream's
// acknowledgement. It waits a few round trips (at least 100 ms, at most
// 2 s) or until the client closes, counted as in flight so that the drain
// waits too.
func (s *Server) awaitDelivery(c *quic.Conn) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	st := c.ConnectionStats()
	grace := min(max(4*(st.SmoothedRTT+4*st.MeanDeviation), 100*time.Millisecond), 2*time.Second)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.Context().Done():
	case <-t.C:
	}
}

// serveQUICStream reads st's one query, to its FIN, and writes the answer.
func (s *Server) serveQUICStream(c *quic.Conn, st *quic.Stream, client netip.Addr) {
	l := &s.limits
	st.SetReadDeadline(time.Now().Add(l.ReadTimeout))
	var prefix [2]byte
	if _, err := io.ReadFull(st, prefix[:]); err != nil {
		s.quicReadFailed(c, st, err)
		return
	}
	n := int(binary.BigEndian.Uint16(prefix[:]))
	if n < headerSize || n > l.MaxQuerySize {
		s.quicDrop(c, DoQProtocolError, "length "+strconv.Itoa(n)+" outside 12 to "+strconv.Itoa(l.MaxQuerySize))
		return
	}
	raw := make([]byte, n+1) // one byte more, to see the FIN after the query
	if _, err := io.ReadFull(st, raw[:n]); err != nil {
		s.quicReadFailed(c, st, err)
		return
	}
	switch k, err := io.ReadFull(st, raw[n:]); {
	case k > 0:
		s.quicDrop(c, DoQProtocolError, "more than one message on a stream")
		return
	case !errors.Is(err, io.EOF):
		s.quicReadFailed(c, st, err)
		return
	}
	raw = raw[:n]
	var received time.Time // for the wiretap only
	if s.Wiretap != nil {
		received = time.Now()
	}
	if raw[0] != 0 || raw[1] != 0 {
		s.quicDrop(c, DoQProtocolError, "message ID not 0")
		return
	}
	q, reply, err := checkQuery(raw)
	if err != nil {
		s.quicDrop(c, DoQProtocolError, err.Error())
		return
	}
	if reply == nil {
		ctx := st.Context() // ends when the client stops reading or the connection ends
		reply = s.resolve(ctx, q, client)
		if ctx.Err() != nil {
			st.CancelWrite(DoQRequestCancelled)
			return
		}
	}
	s.writeQUIC(c, st, reply, q, raw, received)
}

// writeQUIC sends the framed answer to query (read at received) and ends
// the stream; the wiretap, if any, gets both while the answer's buffer is
// still this call's.
func (s *Server) writeQUIC(c *quic.Conn, st *quic.Stream, reply, q *dns.Msg, query []byte, received time.Time) {
	bp := frames.Get().(*[]byte)
	defer frames.Put(bp)
	frame := frameReply(bp, reply, q)
	st.SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
	if _, err := st.Write(frame); err != nil {
		st.CancelWrite(DoQRequestCancelled)
		s.tapQUIC(c, query, received, nil)
		return
	}
	st.Close()
	s.tapQUIC(c, query, received, frame[2:])
}

// tapQUIC hands the wiretap one DoQ question and its answer (nil: none
// was sent).
func (s *Server) tapQUIC(c *quic.Conn, query []byte, received time.Time, answer []byte) {
	if s.Wiretap != nil {
		wiretap.Client(s.Wiretap, wiretap.DoQ, wiretap.AddrPort(c.RemoteAddr()), wiretap.AddrPort(c.LocalAddr()), query, received, answer, time.Now())
	}
}

// quicReadFailed handles a query that did not arrive whole: a stream the
// client reset is cancelled (DOQ_REQUEST_CANCELLED), one that ended early
// is a protocol error, one that stalled is given up.
func (s *Server) quicReadFailed(c *quic.Conn, st *quic.Stream, err error) {
	var se *quic.StreamError
	switch {
	case errors.As(err, &se) && se.Remote:
		st.CancelWrite(DoQRequestCancelled)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		s.quicDrop(c, DoQProtocolError, "stream ended inside a message")
	case isTimeout(err):
		s.quicDropStream(c, st, "query stalled past the read timeout")
	default: // the connection is gone
		st.CancelWrite(DoQInternalError)
	}
}

// quicDrop closes c for breaking the rules.
func (s *Server) quicDrop(c *quic.Conn, code quic.ApplicationErrorCode, reason string) {
	if f := s.OnDrop; f != nil {
		f(c.RemoteAddr(), reason)
	}
	c.CloseWithError(code, reason)
}

// quicDropStream gives up one stream with DOQ_REQUEST_CANCELLED; the
// connection goes on.
func (s *Server) quicDropStream(c *quic.Conn, st *quic.Stream, reason string) {
	if f := s.OnDrop; f != nil {
		f(c.RemoteAddr(), reason)
	}
	st.CancelRead(DoQRequestCancelled)
	st.CancelWrite(DoQRequestCancelled)
}
