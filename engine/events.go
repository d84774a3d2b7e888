package engine

import (
	"net/netip"
	"time"
)

// Outcome is how one attempt ended.
type Outcome uint8

const (
	OutcomeAnswer         Outcome = iota // NOERROR reply used (NODATA included)
	OutcomeNXDomain                      // NXDOMAIN reply used
	OutcomeTruncated                     // UDP reply with TC: TCP retry follows
	OutcomeTimeout                       // no matching reply in the transaction's own time
	OutcomeRcode                         // a matching reply with a failure rcode
	OutcomeSendError                     // open, bind or send failed
	OutcomeRecvError                     // receive failed, or TCP closed before a whole reply
	OutcomeConnectError                  // TCP connection failed
	OutcomeLocalError                    // local resource or permission error: no demotion
	OutcomeCancelled                     // ended by the client's or the question's budget
	OutcomeHandshakeError                // TLS handshake failed (certificate, name, pin, alert, stall): an encrypted transport's connect
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"answer", "nxdomain", "truncated", "timeout", "rcode",
	"send_error", "recv_error", "connect_error", "local_error", "cancelled", "handshake_error"}

func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// failure reports whether the outcome is charged to the server: it counts
// upstream_failed and demotes.
func (o Outcome) failure() bool {
	switch o {
	case OutcomeTimeout, OutcomeRcode, OutcomeSendError, OutcomeRecvError, OutcomeConnectError, OutcomeHandshakeError:
		return true
	}
	return false
}

// AttemptEvent describes one upstream attempt, whatever its outcome.
type AttemptEvent struct {
	Question  uint64 // the question's id
	QName     string
	QType     uint16
	Scope     string
	Attempt   int // 1-based, across the whole question
	Server    netip.AddrPort
	Transport Transport
	// Conn says whether an encrypted attempt's connection was new,
	// resumed or reused (ConnNone for UDP and TCP).
	Conn    Conn
	Outcome Outcome
	// Class is a socket failure's class ("tls" for a refused
	// certificate, "http" for a DoH status or content type that is not
	// DNS, "refused", ...); 0 when the attempt got a reply.
	Class   ErrorClass
	Rcode   int // -1 when no reply was used
	RTT     time.Duration
	End     time.Time // when the attempt ended: its start's reading plus RTT
	Demoted bool      // the attempt demoted the server
	Trace   *Trace    // the question's trace, nil without one
	Proto   string    // the client's protocol (QuestionContext.SetProto), "" when not said
}

// QuestionEvent describes one question at its end.
type QuestionEvent struct {
	Question uint64
	QName    string
	QType    uint16
	Scope    string
	Result   Result
	Reason   Reason
	Attempts int
	CacheHit bool
	Duration time.Duration
	End      time.Time // when the question ended: its start's reading plus Duration
	Trace    *Trace    // the question's trace, nil without one
	Proto    string    // the client's protocol (QuestionContext.SetProto), "" when not said
	// Joined is the trace of the identical question this one waited for
	// instead of asking; Served the traces of the questions that waited
	// for this one (nil: none).
	Joined *Trace
	Served []*Trace
}

// Observer receives the engine's events. Events are passed by value so an
// implementation can log them without allocating. Calls come from the
// question's goroutine and must not block.
type Observer interface {
	Attempt(AttemptEvent)
	Question(QuestionEvent)
}

type nopObserver struct{}

func (nopObserver) Attempt(AttemptEvent)   {}
func (nopObserver) Question(QuestionEvent) {}
