package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// udpReceiveSize is the receive buffer of a UDP transaction. Queries
// advertise 1232 bytes; a larger datagram is cut and then ignored as garbage.
const udpReceiveSize = 4096

var udpBuffers = sync.Pool{New: func() any { b := make([]byte, udpReceiveSize); return &b }}

// budget says which of the three time budgets set a transaction's deadline.
type budget uint8

const (
	budgetTransaction budget = iota // the transaction's own timeout
	budgetQuestion                  // engine.question_timeout
	budgetClient                    // the client's context
)

// transaction is one exchange with one server: one fresh socket, one random
// ID, one deadline. query is the wire query with two bytes in front for the
// TCP length; the transaction writes its own ID into it.
type transaction struct {
	server    *upstream
	transport Transport
	source    netip.Addr
	query     []byte
	deadline  time.Time
	setBy     budget
}

// exchangeResult is what a transaction brings back.
type exchangeResult struct {
	outcome Outcome
	reply   *dns.Msg   // set for answer, nxdomain, rcode and truncated
	rcode   int        // -1 without a reply
	class   ErrorClass // the socket error's class, for a socket failure
}

// newID returns a random 16-bit ID from the cryptographic source.
func newID() uint16 {
	var b [2]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint16(b[:])
}

// exchange runs one transaction to its end. It never returns early: a reply
// that does not match, garbage included, is counted and ignored until the
// deadline.
func (e *Engine) exchange(ctx context.Context, tx *transaction) exchangeResult {
	binary.BigEndian.PutUint16(tx.query[2:], newID())
	msg := tx.query[2:]
	binary.BigEndian.PutUint16(tx.query, uint16(len(msg)))

	sock, err := e.open(ctx, tx)
	if err != nil {
		if tx.transport == TCP {
			return e.socketFailure(ctx, tx, err, OutcomeConnectError)
		}
		return e.socketFailure(ctx, tx, err, OutcomeSendError)
	}
	defer sock.Close()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { sock.Close() })
		defer stop()
	}

	wire := msg
	if tx.transport == TCP {
		wire = tx.query
	}
	if err := sock.Send(wire); err != nil {
		return e.socketFailure(ctx, tx, err, OutcomeSendError)
	}
	if tx.transport == TCP {
		return e.receiveTCP(ctx, tx, sock, msg)
	}
	return e.receiveUDP(ctx, tx, sock, msg)
}

// open opens tx's socket. A TCP connect may take until the deadline; a
// client that goes away meanwhile ends the wait at once, and the socket,
// should it still connect, is closed as soon as it does.
func (e *Engine) open(ctx context.Context, tx *transaction) (Socket, error) {
	t, server, source, deadline := tx.transport, tx.server.addr, tx.source, tx.deadline
	if t != TCP || ctx.Done() == nil {
		return e.network.Open(t, server, source, deadline)
	}
	type opened struct {
		sock Socket
		err  error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := e.network.Open(t, server, source, deadline)
		done <- opened{s, err}
	}()
	select {
	case o := <-done:
		return o.sock, o.err
	case <-ctx.Done():
		go func() {
			if o := <-done; o.sock != nil {
				o.sock.Close()
			}
		}()
		return nil, &SocketError{Op: "connect", Class: ErrClosed, Err: ctx.Err()}
	}
}

func (e *Engine) receiveUDP(ctx context.Context, tx *transaction, sock Socket, query []byte) exchangeResult {
	bp := udpBuffers.Get().(*[]byte)
	defer udpBuffers.Put(bp)
	buf := *bp
	for {
		n, from, err := sock.Receive(buf, tx.deadline)
		if err != nil {
			return e.socketFailure(ctx, tx, err, OutcomeRecvError)
		}
		if from != tx.server.addr {
			e.counters.mismatchedReplies.Add(1)
			continue
		}
		if r, ok := e.matched(buf[:n], query, UDP); ok {
			return r
		}
	}
}

func (e *Engine) receiveTCP(ctx context.Context, tx *transaction, sock Socket, query []byte) exchangeResult {
	var pending []byte
	var chunk [2048]byte
	for {
		// Take every whole message already read.
		for len(pending) >= 2 {
			l := int(binary.BigEndian.Uint16(pending))
			if len(pending) < 2+l {
				break
			}
			m := pending[2 : 2+l]
			pending = pending[2+l:]
			if r, ok := e.matched(m, query, TCP); ok {
				return r
			}
		}
		n, _, err := sock.Receive(chunk[:], tx.deadline)
		if err != nil {
			return e.socketFailure(ctx, tx, err, OutcomeRecvError)
		}
		pending = append(pending, chunk[:n]...)
	}
}

// matched checks one reply against the query. A reply that does not match,
// or matches but does not parse, counts as mismatched and is ignored.
func (e *Engine) matched(m, query []byte, t Transport) (exchangeResult, bool) {
	if !replyMatches(m, query) {
		e.counters.mismatchedReplies.Add(1)
		return exchangeResult{}, false
	}
	reply := new(dns.Msg)
	if err := reply.Unpack(m); err != nil {
		e.counters.mismatchedReplies.Add(1)
		return exchangeResult{}, false
	}
	r := exchangeResult{reply: reply, rcode: reply.Rcode}
	switch {
	case reply.Truncated && t == UDP:
		// Over TCP there is nothing bigger to retry with: the reply
		// is used as it is.
		r.outcome = OutcomeTruncated
	case reply.Rcode == dns.RcodeSuccess:
		r.outcome = OutcomeAnswer
	case reply.Rcode == dns.RcodeNameError:
		r.outcome = OutcomeNXDomain
	default:
		r.outcome = OutcomeRcode
	}
	return r, true
}

// socketFailure turns a socket error into the attempt's outcome. A deadline
// set by the client's or the question's budget, or a socket closed because
// the client went away, is not the server's fault: cancelled.
func (e *Engine) socketFailure(ctx context.Context, tx *transaction, err error, otherwise Outcome) exchangeResult {
	class := classOf(err)
	r := exchangeResult{rcode: -1, class: class}
	switch {
	case ctx.Err() != nil:
		r.outcome = OutcomeCancelled
	case class == ErrTimeout && tx.setBy != budgetTransaction:
		r.outcome = OutcomeCancelled
	case class == ErrTimeout:
		r.outcome = OutcomeTimeout
	case class == ErrLocal:
		r.outcome = OutcomeLocalError
	default:
		r.outcome = otherwise
	}
	return r
}
