package engine

import (
	"strconv"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// maxTried is how many attempts a question records for its Extended DNS
// Error. Three is the rule; a larger engine.attempts records its first
// eight and counts the rest.
const maxTried = 8

// tried is the record of a question's attempts, in order, in a fixed
// array. A question makes it only when an attempt leaves it able to end
// unavailable, so the happy path allocates nothing for it and the
// question's stack does not carry it.
type tried struct {
	n     int // attempts recorded or counted
	recs  [maxTried]triedAttempt
	scope *scope // the scope whose servers recs index
}

// triedAttempt is one attempt as the Extended DNS Error names it: 8
// bytes, the server by its index in the scope's list.
type triedAttempt struct {
	server    uint16 // index in the question's scope's servers
	transport Transport
	outcome   Outcome
	class     ErrorClass // the socket error's class, for socket failures
	rcode     int16      // the reply's rcode, for OutcomeRcode
}

func (t *tried) add(sc *scope, server int, tr Transport, o Outcome, rcode int, class ErrorClass) {
	t.scope = sc
	if t.n < maxTried {
		t.recs[t.n] = triedAttempt{server: uint16(server), transport: tr, outcome: o, class: class, rcode: int16(rcode)}
	}
	t.n++
}

// what is an attempt's outcome in a word or two: the rcode's mnemonic
// (SERVFAIL), how the socket failed (refused, unreachable, reset), or the
// outcome.
func (a *triedAttempt) what() string {
	switch a.outcome {
	case OutcomeRcode:
		if s, ok := dnswire.RcodeName(int(a.rcode)); ok {
			return s
		}
		return "rcode " + strconv.Itoa(int(a.rcode))
	case OutcomeHandshakeError:
		return "tls handshake " + a.class.String()
	case OutcomeSendError, OutcomeRecvError, OutcomeConnectError:
		switch a.class {
		case ErrRefused, ErrUnreachable, ErrReset, ErrClosed:
			return a.class.String()
		}
	}
	return a.outcome.String()
}

// text lists the attempts for the Extended DNS Error's EXTRA-TEXT in at
// most room bytes: "10.0.0.53:53/udp timeout; 10.0.0.54:53/udp SERVFAIL".
// Attempts that do not fit are counted: "; +2 more".
func (t *tried) text(room int) string {
	if t.n == 0 || room <= 0 {
		return ""
	}
	recorded := min(t.n, maxTried)
	parts := make([]string, recorded)
	for i := range recorded {
		a := &t.recs[i]
		parts[i] = t.scope.servers[a.server].key + "/" + a.transport.String() + " " + a.what()
	}
	for keep := recorded; keep >= 0; keep-- {
		s := joinAttempts(parts[:keep])
		if left := t.n - keep; left > 0 {
			if keep > 0 {
				s += "; "
			}
			s += "+" + strconv.Itoa(left) + " more"
		}
		if len(s) <= room {
			return s
		}
	}
	return ""
}

func joinAttempts(parts []string) string {
	n := 0
	for _, p := range parts {
		n += len(p) + 2
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, "; "...)
		}
		b = append(b, p...)
	}
	return string(b)
}
