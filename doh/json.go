package doh

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/miekg/dns"
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

// serveJSON answers a JSON request: GET with name, and optionally type
// (mnemonic or number, default A), do and cd (0/1/true/false).
func (h *handler) serveJSON(w http.ResponseWriter, r *http.Request, x *Exchange, onDoHPath bool) {
	x.Format = FormatJSON
	if r.Method != http.MethodGet {
		w.Header()["Allow"] = allowGet
		h.failJSON(w, x, http.StatusMethodNotAllowed, "method not allowed: the JSON form is GET only")
		return
	}
	q, err := jsonQuery(r.URL.Query())
	if err != nil {
		h.failJSON(w, x, http.StatusBadRequest, err.Error())
		return
	}
	x.QName, x.QType = q.Question[0].Name, q.Question[0].Qtype
	if !h.resolve(r.Context(), w, q, nil, x) {
		return
	}
	reply := x.Response.Msg
	body, err := json.Marshal(toJSON(reply))
	if err != nil {
		h.failJSON(w, x, http.StatusInternalServerError, "cannot encode the answer: "+err.Error())
		return
	}
	hdr := w.Header()
	hdr["Content-Type"] = contentTypeJSON
	hdr["Content-Length"] = []string{strconv.Itoa(len(body) + 1)}
	hdr["Cache-Control"] = cacheControlHeader(reply)
	if onDoHPath {
		hdr["Vary"] = varyAccept
	}
	h.setResolvedHeaders(hdr, x)
	x.Status, x.Rcode = http.StatusOK, reply.Rcode
	w.WriteHeader(http.StatusOK)
	w.Write(append(body, '\n'))
}

// failJSON answers a JSON request with an HTTP error and {"error": "..."}.
func (h *handler) failJSON(w http.ResponseWriter, x *Exchange, status int, problem string) {
	x.Status, x.Problem = status, problem
	body, _ := json.Marshal(jsonError{Error: problem})
	hdr := w.Header()
	hdr["Content-Type"] = contentTypeErr
	hdr["Cache-Control"] = noStore
	hdr["Content-Length"] = []string{strconv.Itoa(len(body) + 1)}
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}

// jsonQuery builds the query a JSON request asks: RD set, ID 0, EDNS with
// DO when do is set, CD when cd is set.
func jsonQuery(v url.Values) (*dns.Msg, error) {
	name := v.Get("name")
	if name == "" {
		return nil, errors.New("missing name parameter: want ?name=NAME&type=TYPE")
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	qtype, err := parseType(v.Get("type"))
	if err != nil {
		return nil, err
	}
	do, err := parseFlag("do", v.Get("do"))
	if err != nil {
		return nil, err
	}
	cd, err := parseFlag("cd", v.Get("cd"))
	if err != nil {
		return nil, err
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.Id = 0
	q.CheckingDisabled = cd
	if do {
		q.SetEdns0(dns.DefaultMsgSize, true)
	}
	return q, nil
}

// checkName accepts a domain name in presentation format, at most 253
// characters without the final dot.
func checkName(name string) error {
	n, ok := dns.IsDomainName(name)
	if !ok || n == 0 && name != "." || len(strings.TrimSuffix(name, ".")) > 253 {
		return errors.New("bad name parameter " + strconv.Quote(name) + ": not a domain name")
	}
	return nil
}

// parseType reads a query type: a mnemonic ("AAAA", any case), a number
// ("28"), or RFC 3597 "TYPE28". "" is A. Meta types that make no sense as a
// forwarded question are refused.
func parseType(s string) (uint16, error) {
	if s == "" {
		return dns.TypeA, nil
	}
	var t uint16
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		t = uint16(n)
	} else if v, ok := dns.StringToType[strings.ToUpper(s)]; ok {
		t = v
	} else if u := strings.ToUpper(s); strings.HasPrefix(u, "TYPE") {
		if n, err := strconv.ParseUint(u[4:], 10, 16); err == nil {
			t = uint16(n)
		}
	}
	switch t {
	case 0:
		return 0, errors.New("bad type parameter " + strconv.Quote(s) + ": want a type name (A, AAAA, ...) or number 1-65535")
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB:
		return 0, errors.New("bad type parameter " + strconv.Quote(s) + ": " + dns.Type(t).String() + " cannot be asked here")
	}
	return t, nil
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

// toJSON converts a DNS message to the JSON form. OPT is not a record
// there; its Extended DNS Error becomes the Comment.
func toJSON(m *dns.Msg) jsonMessage {
	j := jsonMessage{
		Status: m.Rcode, TC: m.Truncated, RD: m.RecursionDesired, RA: m.RecursionAvailable,
		AD: m.AuthenticatedData, CD: m.CheckingDisabled,
		Question:  make([]jsonQuestion, 0, len(m.Question)),
		Answer:    jsonRecords(m.Answer),
		Authority: jsonRecords(m.Ns),
	}
	for _, q := range m.Question {
		j.Question = append(j.Question, jsonQuestion{Name: q.Name, Type: q.Qtype})
	}
	for _, rr := range m.Extra {
		opt, ok := rr.(*dns.OPT)
		if !ok {
			j.Additional = append(j.Additional, jsonRecord{
				Name: rr.Header().Name, Type: rr.Header().Rrtype, TTL: rr.Header().Ttl, Data: rdata(rr)})
			continue
		}
		for _, o := range opt.Option {
			if ede, ok := o.(*dns.EDNS0_EDE); ok {
				j.Comment = edeComment(ede)
			}
		}
	}
	return j
}

// edeComment reads an Extended DNS Error for people: "EDE 22 (No
// Reachable Authority): no servers", without the colon when there is no
// extra text.
func edeComment(e *dns.EDNS0_EDE) string {
	s := "EDE " + strconv.Itoa(int(e.InfoCode))
	if name, ok := dns.ExtendedErrorCodeToString[e.InfoCode]; ok {
		s += " (" + name + ")"
	}
	if e.ExtraText != "" {
		s += ": " + e.ExtraText
	}
	return s
}

func jsonRecords(rrs []dns.RR) []jsonRecord {
	if len(rrs) == 0 {
		return nil
	}
	out := make([]jsonRecord, 0, len(rrs))
	for _, rr := range rrs {
		h := rr.Header()
		out = append(out, jsonRecord{Name: h.Name, Type: h.Rrtype, TTL: h.Ttl, Data: rdata(rr)})
	}
	return out
}

// rdata is a record's data in presentation format: the record without its
// owner, TTL, class and type.
func rdata(rr dns.RR) string {
	return strings.TrimPrefix(rr.String(), rr.Header().String())
}
