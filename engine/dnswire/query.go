package dnswire

import (
	"errors"
	"strconv"
	"strings"
)

// One query check for every front end (DoH in the wire and JSON forms,
// DoT, Do53, the admin /explain): a question is accepted or refused here,
// by CheckQuery for a query on the wire and by ParseQuestion for a name
// and type in text, so a question gets the same verdict however it came.

// Verdict is what a front end does with a query.
type Verdict uint8

const (
	// Accepted: the query goes to the resolver.
	Accepted Verdict = iota
	// Refused: the query is answered here with a DNS error (Rcode).
	Refused
	// Unreadable: not a query this forwarder reads (too short, a
	// response, not exactly one question, a question that does not read).
	// DoH answers 400 and no DNS message; Do53 and DoT answer FORMERR
	// to a query header whose QDCOUNT is not 1, and nothing to the rest
	// (a UDP datagram is dropped, a stream closed).
	Unreadable
)

func (v Verdict) String() string {
	switch v {
	case Accepted:
		return "accepted"
	case Refused:
		return "refused"
	}
	return "unreadable"
}

// QueryCheck is CheckQuery's verdict on a query.
type QueryCheck struct {
	Verdict Verdict
	// Rcode is the DNS error a Refused query is answered with: FORMERR,
	// NOTIMP or BADVERS.
	Rcode int
	// Problem says why the query is not Accepted.
	Problem string
	// NameOff is the offset of the question's name and Type its type,
	// when the query has one question that reads (NameOff 0 otherwise).
	NameOff int
	Type    uint16
}

// RefusedType is the rcode a question of type t is answered with here, or
// -1 when t may be asked. OPT, TSIG and TKEY are records, never a question
// (RFC 6891 §6.1.1, RFC 8945 §5.2, RFC 2930): FORMERR. AXFR, IXFR, MAILA
// and MAILB ask for a zone transfer or the obsolete mail records (RFC 1035
// §3.2.3, RFC 1995): a forwarder does not pass them on, NOTIMP.
func RefusedType(t uint16) int {
	switch t {
	case TypeOPT, TypeTSIG, TypeTKEY:
		return RcodeFormatError
	case TypeAXFR, TypeIXFR, TypeMAILA, TypeMAILB:
		return RcodeNotImplemented
	}
	return -1
}

// refusedTypeProblem says why RefusedType refuses t.
func refusedTypeProblem(t uint16, rcode int) string {
	if rcode == RcodeFormatError {
		return "malformed query: " + TypeString(t) + " as the question type"
	}
	return "question type " + TypeString(t) + " is not implemented"
}

// CheckQuery reads a wire query and gives its verdict:
//   - Unreadable: shorter than the header, a response (QR set), a QDCOUNT
//     other than 1, or a question that does not read.
//   - Refused with NOTIMP: an opcode other than QUERY (the header says
//     what it is: it is answered even if the rest is odd), or a question
//     type RefusedType refuses with NOTIMP.
//   - Refused with FORMERR: records that do not read, records in the
//     answer or authority section, a second OPT or one not owned by the
//     root, EDNS options that do not read, a question type RefusedType
//     refuses with FORMERR.
//   - Refused with BADVERS: EDNS version above 0 (RFC 6891 §6.1.3).
//   - Accepted otherwise.
//
// It allocates nothing.
func CheckQuery(raw []byte) QueryCheck {
	if len(raw) < HeaderLen {
		return QueryCheck{Verdict: Unreadable, Problem: "undecodable DNS message: shorter than the 12-byte header"}
	}
	if raw[2]&0x80 != 0 {
		return QueryCheck{Verdict: Unreadable, Problem: "not a query: the message is a response (QR set)"}
	}
	p, _ := NewParser(raw)
	h := p.Header()
	var c QueryCheck
	var qerr error
	if q, ok := p.Question(); ok {
		var buf [MaxNameLen]byte
		if _, _, qerr = AppendNameWire(buf[:0], raw, q.NameOff); qerr == nil && h.Counts[0] == 1 {
			c.NameOff, c.Type = q.NameOff, q.Type
		}
	} else if qerr = p.Err(); qerr == nil {
		qerr = errors.New("the question is missing")
	}
	if op := h.Opcode(); op != OpcodeQuery {
		c.Verdict, c.Rcode = Refused, RcodeNotImplemented
		c.Problem = "opcode " + opcodeText(op) + " is not implemented"
		return c
	}
	if h.Counts[0] != 1 {
		return QueryCheck{Verdict: Unreadable, Problem: "want exactly one question, QDCOUNT is " + strconv.Itoa(int(h.Counts[0]))}
	}
	if qerr != nil {
		return QueryCheck{Verdict: Unreadable, Problem: "undecodable DNS message: " + qerr.Error()}
	}
	// Header and question read: what is wrong from here is FORMERR, or
	// another DNS error.
	c.Verdict, c.Rcode = Refused, RcodeFormatError
	opts, version, records := 0, 0, false
	for {
		rr, ok := p.Next()
		if !ok {
			break
		}
		if rr.Section != SectionAdditional {
			records = true
			continue
		}
		if rr.Type != TypeOPT {
			continue
		}
		if why := optionsProblem(rr.Rdata(raw)); why != "" {
			c.Problem = "malformed DNS message: " + why
			return c
		}
		opts++
		if raw[rr.Off] != 0 && c.Problem == "" {
			c.Problem = "malformed query: OPT record with a name other than the root"
		}
		version = int(ReadOPT(raw, rr).Version)
	}
	switch {
	case p.Err() != nil:
		c.Problem = "malformed DNS message: " + p.Err().Error()
	case records:
		c.Problem = "malformed query: records in the answer or authority section"
	case c.Problem != "":
	case opts > 1:
		c.Problem = "malformed query: more than one OPT record"
	case RefusedType(c.Type) >= 0:
		c.Rcode = RefusedType(c.Type)
		c.Problem = refusedTypeProblem(c.Type, c.Rcode)
	case opts == 1 && version != 0:
		c.Rcode, c.Problem = RcodeBadVers, "EDNS version "+strconv.Itoa(version)+" is not supported"
	default:
		c.Verdict, c.Rcode = Accepted, 0
	}
	return c
}

// opcodeText is an opcode's mnemonic, or its number when it has none.
func opcodeText(op int) string {
	if op < len(opcodeNames) && opcodeNames[op] != "" {
		return opcodeNames[op]
	}
	return strconv.Itoa(op)
}

// optionsProblem says what is wrong with an OPT record's options, "" when
// they read: each whole, and a client subnet (RFC 7871 §6) of a known
// family within its prefix lengths, as miekg/dns reads them.
func optionsProblem(data []byte) string {
	off := 0
	for off < len(data) {
		code, value, next, ok := NextOption(data, off)
		if !ok {
			return "an EDNS option runs past its record"
		}
		if code == EDNS0SUBNET {
			if len(value) < 4 {
				return "client subnet option cut short"
			}
			family, source, scope := int(value[0])<<8|int(value[1]), value[2], value[3]
			switch {
			case family == 0 && source != 0, family > 2:
				return "client subnet: bad address family"
			case family == 1 && (source > 32 || scope > 32), family == 2 && (source > 128 || scope > 128):
				return "client subnet: bad netmask"
			}
		}
		off = next
	}
	return ""
}

// QuestionError is a question in text that does not read: the DoH JSON
// form answers it 400, as DoH answers an Unreadable wire query.
type QuestionError struct {
	Param, Value, Why string
}

func (e *QuestionError) Error() string {
	if e.Value == "" && e.Param == "name" {
		return "missing name parameter: want ?name=NAME&type=TYPE"
	}
	return "bad " + e.Param + " parameter " + strconv.Quote(e.Value) + ": " + e.Why
}

// ParseQuestion reads a question in text, as the JSON form's and
// /explain's name and type parameters give it: name a domain name in
// presentation form (made fully qualified) whose wire form fits 255
// octets, so at most 253 characters without escapes and the final dot
// (RFC 1035 §2.3.4); qtype a mnemonic in any case ("AAAA"), a number 1 to
// 65535 ("28") or RFC 3597's "TYPE28", "" being A. It returns the name in
// wire form appended to dst. A type RefusedType refuses reads: the query
// built from it gets CheckQuery's verdict, like one that came on the wire.
func ParseQuestion(dst []byte, name, qtype string) (wire []byte, fqdn string, t uint16, err error) {
	if name == "" {
		return dst, "", 0, &QuestionError{"name", name, "missing"}
	}
	fqdn = Fqdn(name)
	wire, err = PackName(dst, fqdn)
	switch {
	case err == ErrLongName:
		return dst, "", 0, &QuestionError{"name", name, "longer than 255 octets in wire form (253 characters)"}
	case err != nil:
		return dst, "", 0, &QuestionError{"name", name, "not a domain name"}
	}
	if t, err = ParseType(qtype); err != nil {
		return dst, "", 0, err
	}
	return wire, fqdn, t, nil
}

// ParseType reads a question type as ParseQuestion does.
func ParseType(s string) (uint16, error) {
	if s == "" {
		return TypeA, nil
	}
	if n, err := strconv.ParseUint(s, 10, 16); err == nil && n > 0 {
		return uint16(n), nil
	}
	u := strings.ToUpper(s)
	if t, ok := TypeFromString(u); ok {
		return t, nil
	}
	if rest, ok := strings.CutPrefix(u, "TYPE"); ok {
		if n, err := strconv.ParseUint(rest, 10, 16); err == nil && n > 0 {
			return uint16(n), nil
		}
	}
	return 0, &QuestionError{"type", s, "want a type name (A, AAAA, ...), TYPEn or a number 1-65535"}
}
