package doh

import (
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// The JSON form, as public JSON DoH services (Google, Cloudflare) answer:
//
//	{"Status":0,"TC":false,"RD":true,"RA":true,"AD":false,"CD":false,
//	 "Question":[{"name":"example.org.","type":1}],
//	 "Answer":[{"name":"example.org.","type":1,"TTL":300,"data":"192.0.2.1"}]}
type jsonMessage struct {
	Status     int            `json:"Status"`
	TC         bool           `json:"TC"`
	RD         bool           `json:"RD"`
	RA         bool           `json:"RA"`
	AD         bool           `json:"AD"`
	CD         bool           `json:"CD"`
	Question   []jsonQuestion `json:"Question"`
	Answer     []jsonRecord   `json:"Answer,omitempty"`
	Authority  []jsonRecord   `json:"Authority,omitempty"`
	Additional []jsonRecord   `json:"Additional,omitempty"`
	// Comment carries an Extended DNS Error (RFC 8914), as Google does.
	Comment string `json:"Comment,omitempty"`
}

type jsonQuestion struct {
	Name string `json:"name"`
	Type uint16 `json:"type"`
}

type jsonRecord struct {
	Name string `json:"name"`
	Type uint16 `json:"type"`
	TTL  uint32 `json:"TTL"`
	Data string `json:"data"`
}

type jsonError struct {
	Error string `json:"error"`
}

// jsonQuery appends the query a JSON request asks to dst: RD set, ID
// 0, EDNS (DO when do is set), CD when cd is set; and the question's
// name (as asked, fully qualified) and type. EDNS always: an Extended DNS
// Error (RFC 8914), the JSON form's Comment, rides in the reply's OPT
// record, which a reply to a query without one may not carry (RFC 6891
// section 7); a stale answer's EDE 3 included. The name and type read as
// every front end reads them (dnswire.ParseQuestion); the query built is
// then checked as a wire query is (dnswire.CheckQuery), so a meta type
// gets the same DNS error here as on the wire.
func jsonQuery(v url.Values, dst []byte) (query []byte, qname string, qtype uint16, err error) {
	var buf [dnswire.MaxNameLen]byte
	wireName, qname, qtype, err := dnswire.ParseQuestion(buf[:0], v.Get("name"), v.Get("type"))
	if err != nil {
		return dst, "", 0, err
	}
	do, err := parseFlag("do", v.Get("do"))
	if err != nil {
		return dst, "", 0, err
	}
	cd, err := parseFlag("cd", v.Get("cd"))
	if err != nil {
		return dst, "", 0, err
	}
	flags := dnswire.FlagRD
	if cd {
		flags |= dnswire.FlagCD
	}
	b := dnswire.NewBuilder(dst, dnswire.Header{Flags: flags})
	b.Question(wireName, qtype, dnswire.ClassINET)
	var ednsFlags uint32
	if do {
		ednsFlags = dnswire.EDNSFlagDO
	}
	b.OPT(dnswire.DefaultMsgSize, ednsFlags, nil)
	query, err = b.Finish()
	return query, qname, qtype, err
}

// parseFlag reads a 0/1/true/false parameter; "" is false.
func parseFlag(name, s string) (bool, error) {
	switch strings.ToLower(s) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, errors.New("bad " + name + " parameter " + strconv.Quote(s) + ": want 0, 1, true or false")
}

var errReplyUnreadable = errors.New("the reply does not read as a DNS message")

// jsonFromWire converts a wire reply to the JSON form. Names and record
// data are in presentation format (dnswire's text, as miekg/dns writes
// it); data that does not read as its type shows in RFC 3597's generic
// form. OPT is not a record there: its extended rcode goes into Status
// and its Extended DNS Error becomes the Comment.
func jsonFromWire(m []byte) (jsonMessage, error) {
	p, ok := dnswire.NewParser(m)
	if !ok {
		return jsonMessage{}, errReplyUnreadable
	}
	h := p.Header()
	j := jsonMessage{
		Status: h.Rcode(), TC: h.Has(dnswire.FlagTC), RD: h.Has(dnswire.FlagRD), RA: h.Has(dnswire.FlagRA),
		AD: h.Has(dnswire.FlagAD), CD: h.Has(dnswire.FlagCD),
		Question: make([]jsonQuestion, 0, 1),
	}
	for {
		q, ok := p.Question()
		if !ok {
			break
		}
		name, _, err := dnswire.UnpackName(m, q.NameOff)
		if err != nil {
			return jsonMessage{}, errReplyUnreadable
		}
		j.Question = append(j.Question, jsonQuestion{Name: name, Type: q.Type})
	}
	var data []byte
	for {
		rr, ok := p.Next()
		if !ok {
			break
		}
		if rr.Type == dnswire.TypeOPT && rr.Section == dnswire.SectionAdditional {
			opt := dnswire.ReadOPT(m, rr)
			j.Status = int(opt.ExtRcode)<<4 | h.Rcode()
			for off := 0; ; {
				code, value, next, ok := dnswire.NextOption(opt.Options, off)
				if !ok {
					break
				}
				if code == dnswire.EDNS0EDE && len(value) >= 2 {
					j.Comment = edeComment(uint16(value[0])<<8|uint16(value[1]), string(value[2:]))
				}
				off = next
			}
			continue
		}
		name, _, err := dnswire.UnpackName(m, rr.Off)
		if err != nil {
			return jsonMessage{}, errReplyUnreadable
		}
		if data, err = dnswire.AppendRdataText(data[:0], m, rr.Type, rr.Data, rr.End); err != nil {
			data = dnswire.AppendGenericRdataText(data[:0], rr.Rdata(m))
		}
		rec := jsonRecord{Name: name, Type: rr.Type, TTL: rr.TTL, Data: string(data)}
		switch rr.Section {
		case dnswire.SectionAnswer:
			j.Answer = append(j.Answer, rec)
		case dnswire.SectionAuthority:
			j.Authority = append(j.Authority, rec)
		default:
			j.Additional = append(j.Additional, rec)
		}
	}
	if p.Err() != nil {
		return jsonMessage{}, errReplyUnreadable
	}
	return j, nil
}

// edeComment reads an Extended DNS Error for people: "EDE 22 (No
// Reachable Authority): no servers", without the colon when there is no
// extra text.
func edeComment(code uint16, extra string) string {
	s := "EDE " + strconv.Itoa(int(code))
	if name := dnswire.ExtendedErrorText(code); name != "" {
		s += " (" + name + ")"
	}
	if extra != "" {
		s += ": " + extra
	}
	return s
}
