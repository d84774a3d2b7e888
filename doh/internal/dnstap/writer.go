package dnstap

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	dnstappb "github.com/dnstap/golang-dnstap"
	framestream "github.com/farsightsec/golang-framestream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/dohfwd/dohfwd/engine/wiretap"
)

// Config is where a Writer sends and how much it keeps waiting.
type Config struct {
	Network, Address string // "unix" or "tcp", and the socket's address
	Queue            int    // messages waiting at most; more are dropped
	Identity         string // the server's name in every message
	Version          string // dohfwd's version in every message
	Log              zerolog.Logger
}

// The reconnection backoff: the first retry after minBackoff, each
// failure doubles the wait up to maxBackoff, with up to a quarter of
// jitter so that a fleet does not reconnect at once.
const (
	minBackoff   = 100 * time.Millisecond
	maxBackoff   = 10 * time.Second
	dialTimeout  = 5 * time.Second
	writeTimeout = 5 * time.Second // a collector that stops reading for this long is reconnected
	closeTimeout = 2 * time.Second // what Close waits for the queue to drain

	// How often the writer looks at the queue: see session.
	minPoll = time.Millisecond
	maxPoll = 50 * time.Millisecond
)

// Writer sends messages to one collector. It implements wiretap.Tap.
type Writer struct {
	cfg   Config
	queue chan *record
	free  sync.Pool // *record

	sent, dropped atomic.Uint64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ wiretap.Tap = (*Writer)(nil)

// New starts a Writer; it connects in the background, so a collector that
// is not there yet is no error.
func New(cfg Config) *Writer {
	w := &Writer{cfg: cfg, queue: make(chan *record, max(cfg.Queue, 1)),
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Tap queues m, copied, without waiting: a full queue drops it.
func (w *Writer) Tap(m wiretap.Message) {
	r, _ := w.free.Get().(*record)
	if r == nil {
		r = new(record)
	}
	r.fill(&m)
	select {
	case w.queue <- r:
	default:
		w.dropped.Add(1)
		w.put(r)
	}
}

// Counters are the messages written to the collector and those dropped
// (the queue was full, or a write failed).
func (w *Writer) Counters() (sent, dropped uint64) { return w.sent.Load(), w.dropped.Load() }

// Close sends what is queued (waiting at most closeTimeout), ends the
// Frame Streams session and closes the socket. Messages tapped after
// Close are dropped.
func (w *Writer) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Writer) put(r *record) {
	if cap(r.buf) > 4<<10 {
		return // a big message's buffer is left to the collector
	}
	w.free.Put(r)
}

// run connects, writes until the connection fails, and reconnects after
// the backoff, until Close.
func (w *Writer) run() {
	defer close(w.done)
	log := w.cfg.Log.With().Str("component", "dnstap").Str("address", w.cfg.Address).Logger()
	backoff := minBackoff
	var lastErr string
	for {
		err := w.session()
		if err == nil {
			return // closed
		}
		if msg := err.Error(); msg != lastErr {
			// A collector that stays away is reported once, not at
			// every retry.
			log.Warn().Err(err).Dur("retry_ms", backoff).Msg("dnstap collector unreachable; messages are dropped while the queue is full")
			lastErr = msg
		}
		wait := backoff + rand.N(backoff/4+1)
		select {
		case <-w.stop:
			w.drain()
			return
		case <-time.After(wait):
		}
		if errors.Is(err, errWrite) {
			backoff = minBackoff // it was connected: try again soon
		} else {
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

var errWrite = errors.New("dnstap: write")

// session runs one connection: nil when it ended for Close.
func (w *Writer) session() error {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	conn, err := (&net.Dialer{}).DialContext(ctx, w.cfg.Network, w.cfg.Address)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close()
	fw, err := framestream.NewWriter(conn, &framestream.WriterOptions{
		ContentTypes:  [][]byte{dnstappb.FSContentType},
		Bidirectional: true,
		Timeout:       writeTimeout,
	})
	if err != nil {
		return err
	}
	w.cfg.Log.Info().Str("component", "dnstap").Str("address", w.cfg.Address).Msg("dnstap collector connected")
	enc := newEncoder(w.cfg.Identity, w.cfg.Version)
	write := func(r *record) error {
		b := enc.encode(r)
		w.put(r)
		if _, err := fw.WriteFrame(b); err != nil {
			w.dropped.Add(1)
			return errors.Join(errWrite, err)
		}
		w.sent.Add(1)
		return nil
	}
	// The writer polls the queue instead of waiting on it: a goroutine
	// parked on a channel is woken by every send, and that wake-up, once
	// per message, costs the question path more than the copy (measured
	// with BenchmarkForwardUDPWiretap: about three times the CPU of a
	// question forwarded with the wiretap off). It takes all that waits,
	// flushes, and looks again after poll, which doubles while nothing
	// comes (up to maxPoll) and starts again at minPoll when something
	// does.
	poll := minPoll
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for {
		n := 0
	take:
		for {
			select {
			case r := <-w.queue:
				if err := write(r); err != nil {
					return err
				}
				n++
			default:
				break take
			}
		}
		if n > 0 {
			if err := fw.Flush(); err != nil {
				return errors.Join(errWrite, err)
			}
			poll = minPoll
		} else {
			poll = min(2*poll, maxPoll)
		}
		timer.Reset(poll)
		select {
		case <-timer.C:
		case <-w.stop:
			// Only this goroutine takes from the queue: while it holds
			// some, a receive does not wait.
			deadline := time.Now().Add(closeTimeout)
			for len(w.queue) > 0 && time.Now().Before(deadline) {
				if write(<-w.queue) != nil {
					break
				}
			}
			w.drain()
			fw.Close() // flushes, sends STOP and waits for FINISH
			return nil
		}
	}
}

// drain drops what is queued, counted.
func (w *Writer) drain() {
	for {
		select {
		case r := <-w.queue:
			w.dropped.Add(1)
			w.put(r)
		default:
			return
		}
	}
}

// record is one queued message: the wiretap message with its bytes copied
// into buf (the query, then the response).
type record struct {
	kind         wiretap.Kind
	protocol     wiretap.Protocol
	queryAddr    netip.AddrPort
	responseAddr netip.AddrPort
	queryTime    time.Time
	responseTime time.Time
	buf          []byte
	queryLen     int
	hasResponse  bool
}

func (r *record) fill(m *wiretap.Message) {
	r.kind, r.protocol = m.Kind, m.Protocol
	r.queryAddr, r.responseAddr = m.QueryAddr, m.ResponseAddr
	r.queryTime, r.responseTime = m.QueryTime, m.ResponseTime
	r.buf = r.buf[:0]
	// A response message carries the response; a query message the
	// query. Only what the message is about is copied.
	switch m.Kind {
	case wiretap.ClientResponse, wiretap.ForwarderResponse:
		r.queryLen = 0
		r.buf = append(r.buf, m.Response...)
		r.hasResponse = m.Response != nil
	default:
		r.buf = append(r.buf, m.Query...)
		r.queryLen, r.hasResponse = len(m.Query), false
	}
}

// encoder makes the protobuf bytes of records, reusing its buffer.
type encoder struct {
	identity, version []byte
	out               []byte
}

func newEncoder(identity, version string) *encoder {
	return &encoder{identity: []byte(identity), version: []byte(version)}
}

// The dnstap Message types of wiretap's kinds, and its socket protocols
// (DOQ is 7 in dnstap.proto since DNS over QUIC was added; the Go package
// predates it).
var (
	messageTypes = map[wiretap.Kind]dnstappb.Message_Type{
		wiretap.ClientQuery: dnstappb.Message_CLIENT_QUERY, wiretap.ClientResponse: dnstappb.Message_CLIENT_RESPONSE,
		wiretap.ForwarderQuery: dnstappb.Message_FORWARDER_QUERY, wiretap.ForwarderResponse: dnstappb.Message_FORWARDER_RESPONSE,
	}
	socketProtocols = map[wiretap.Protocol]dnstappb.SocketProtocol{
		wiretap.UDP: dnstappb.SocketProtocol_UDP, wiretap.TCP: dnstappb.SocketProtocol_TCP,
		wiretap.DoT: dnstappb.SocketProtocol_DOT, wiretap.DoH: dnstappb.SocketProtocol_DOH,
		wiretap.DoQ: dnstappb.SocketProtocol(7),
	}
)

func (e *encoder) encode(r *record) []byte {
	m := &dnstappb.Message{
		Type:           messageTypes[r.kind].Enum(),
		SocketProtocol: socketProtocols[r.protocol].Enum(),
	}
	family := func(a netip.Addr) {
		if m.SocketFamily != nil || !a.IsValid() {
			return
		}
		if a.Is4() {
			m.SocketFamily = dnstappb.SocketFamily_INET.Enum()
		} else {
			m.SocketFamily = dnstappb.SocketFamily_INET6.Enum()
		}
	}
	if a := r.queryAddr; a.Addr().IsValid() {
		m.QueryAddress = a.Addr().AsSlice()
		if a.Port() != 0 {
			m.QueryPort = proto.Uint32(uint32(a.Port()))
		}
		family(a.Addr())
	}
	if a := r.responseAddr; a.Addr().IsValid() {
		m.ResponseAddress = a.Addr().AsSlice()
		if a.Port() != 0 {
			m.ResponsePort = proto.Uint32(uint32(a.Port()))
		}
		family(a.Addr())
	}
	if t := r.queryTime; !t.IsZero() {
		m.QueryTimeSec, m.QueryTimeNsec = proto.Uint64(uint64(t.Unix())), proto.Uint32(uint32(t.Nanosecond()))
	}
	if t := r.responseTime; !t.IsZero() {
		m.ResponseTimeSec, m.ResponseTimeNsec = proto.Uint64(uint64(t.Unix())), proto.Uint32(uint32(t.Nanosecond()))
	}
	switch r.kind {
	case wiretap.ClientResponse, wiretap.ForwarderResponse:
		if r.hasResponse {
			m.ResponseMessage = r.buf
		}
	default:
		m.QueryMessage = r.buf[:r.queryLen]
	}
	d := &dnstappb.Dnstap{Identity: e.identity, Version: e.version, Type: dnstappb.Dnstap_MESSAGE.Enum(), Message: m}
	e.out, _ = proto.MarshalOptions{}.MarshalAppend(e.out[:0], d)
	return e.out
}
