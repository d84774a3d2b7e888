package workers

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// runGlue runs script (an ES module beside a copy of rfc8484.mjs) under
// node with in as JSON on stdin and decodes its JSON output into out.
func runGlue(t *testing.T, script string, in, out any) {
	t.Helper()
	node := testtool.Find(t, "node", "the glue's RFC 8484 functions are NOT tested against the Go side without it")
	dir := t.TempDir()
	src, err := os.ReadFile("rfc8484.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rfc8484.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.mjs"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(in)
	cmd := exec.Command(node, "run.mjs")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(b)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("node output %q: %v", res, err)
	}
}

const glueScript = `
import { readFileSync } from "node:fs";
import * as r from "./rfc8484.mjs";
const hex = (b) => b === null ? null : Buffer.from(b).toString("hex");
const bytes = (h) => new Uint8Array(Buffer.from(h, "hex"));
const c = JSON.parse(readFileSync(0, "utf8"));
const out = {
  plain: c.plain.map((q) => r.plainEnd(bytes(q))),
  servfail: c.plain.map((q) => { const b = bytes(q); const end = r.plainEnd(b); return end ? hex(r.servfail(b, end)) : null; }),
  params: c.params.map((p) => hex(r.dnsParam(p))),
  timing: c.answers.map((a) => { const b = bytes(a); return r.serverTiming(b, new DataView(b.buffer)); }),
  trace: c.traces.map((tp) => { const t = r.newTrace(tp); return { resp: r.traceResponse(t), parent: hex(t.subarray(16, 24)), hasParent: t[33] === 1 }; }),
};
process.stdout.write(JSON.stringify(out));
`

type glueOut struct {
	Plain    []int
	Servfail []*string
	Params   []*string
	Timing   []string
	Trace    []struct {
		Resp, Parent string
		HasParent    bool
	}
}

// The glue's RFC 8484 functions (rfc8484.mjs) against the Go code whose
// output they must reproduce: the plain test (doh's; a plain query is one
// the glue sends as a question), the SERVFAIL for an empty reply
// (engine.AppendErrorReply, padded as engine.PadReply pads), the dns
// parameter (base64url), Server-Timing (doh.ServerTiming) and the trace
// (doh.NewTrace, doh.TraceResponse).
func TestGlueRFC8484AsGo(t *testing.T) {
	msg := func(name string, qtype uint16, edit func(*dns.Msg)) string {
		q := new(dns.Msg)
		q.SetQuestion(name, qtype)
		q.Id = 0xbeef
		if edit != nil {
			edit(q)
		}
		b, err := q.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(b)
	}
	edns := func(opts ...dns.EDNS0) func(*dns.Msg) {
		return func(q *dns.Msg) {
			q.SetEdns0(1232, true)
			q.IsEdns0().Option = opts
		}
	}
	padding := &dns.EDNS0_PADDING{Padding: make([]byte, 20)}
	cookie := &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"}
	plain := []struct {
		q    string
		want bool
	}{
		{msg("www.Example.org.", dns.TypeA, nil), true},
		{msg("a-b_c.example.", dns.TypeAAAA, func(q *dns.Msg) { q.CheckingDisabled = true }), true},
		{msg("x.example.", dns.TypeHTTPS, func(q *dns.Msg) { q.RecursionDesired = false }), true},
		{msg("x.example.", dns.TypeA, edns()), true},
		{msg("x.example.", dns.TypeA, edns(padding)), true},
		{msg("x.example.", dns.TypeA, edns(cookie, padding)), true},
		{msg("x.example.", dns.TypeA, edns(&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: []byte{192, 0, 2, 0}})), false},
		{msg("*.example.", dns.TypeA, nil), false},
		{msg("x.example.", dns.TypeAXFR, nil), false},
		{msg("x.example.", dns.TypeA, func(q *dns.Msg) { q.Response = true }), false},
		{msg("x.example.", dns.TypeA, func(q *dns.Msg) { q.Opcode = dns.OpcodeNotify }), false},
		{msg("x.example.", dns.TypeA, func(q *dns.Msg) { q.Question = append(q.Question, q.Question[0]) }), false},
		{msg("x.example.", dns.TypeA, func(q *dns.Msg) {
			q.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "x.example.", Rrtype: dns.TypeA, Class: dns.ClassINET}}}
		}), false},
		{"00", false},
		{msg("x.example.", dns.TypeA, nil) + "00", false},
	}
	var params []string
	var paramWant []*string
	for i := range 40 {
		b := make([]byte, i*7%300)
		for j := range b {
			b[j] = byte(rand.IntN(256))
		}
		s := base64.RawURLEncoding.EncodeToString(b)
		h := hex.EncodeToString(b)
		if len(b) == 0 {
			params, paramWant = append(params, "?dns="), append(paramWant, nil)
			continue
		}
		params, paramWant = append(params, "?dns="+s), append(paramWant, &h)
	}
	for _, bad := range []string{"?dns=A", "?dns=AA=", "?dns=A+A", "?dns=AA%41", "?dns=AAAA&x=1", "?x=1&dns=AAAA", "?dns=AA!A", "?dns=ÀAAA"} {
		params, paramWant = append(params, bad), append(paramWant, nil)
	}
	responses := []engine.Response{
		{Result: engine.ResultAnswer, Attempts: 1, Upstream: 12345678 * time.Nanosecond},
		{Result: engine.ResultAnswer, Attempts: 2, Upstream: 6 * time.Second},
		{Result: engine.ResultNXDomain, Attempts: 1, Upstream: 500 * time.Microsecond},
		{Result: engine.ResultUnavailable, Attempts: 3, Upstream: 999},
		{Result: engine.ResultUnavailable, Attempts: 3, Upstream: 1010 * time.Microsecond},
		{Result: engine.ResultStale, Attempts: 3, Upstream: 4 * time.Second},
		{Result: engine.ResultLocal},
		{Result: engine.ResultLocal, CacheHit: true},
		{Result: engine.ResultAnswer, Shared: true, Attempts: 1, Upstream: time.Millisecond},
	}
	var answers []string
	for i := range responses {
		r := responses[i]
		r.Wire = []byte{1, 2, 3}
		answers = append(answers, hex.EncodeToString(abi.AppendQueryAnswer(nil, &r)))
	}
	traces := []*string{
		nil,
		ptr("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		ptr("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
		ptr("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"),
		ptr("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
		ptr("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
		ptr("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		ptr("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01, 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
	}

	in := map[string]any{"params": params, "answers": answers, "traces": traces}
	var qs []string
	for _, p := range plain {
		qs = append(qs, p.q)
	}
	in["plain"] = qs
	var out glueOut
	runGlue(t, glueScript, in, &out)

	for i, p := range plain {
		raw, _ := hex.DecodeString(p.q)
		if got := out.Plain[i] != 0; got != p.want {
			t.Errorf("query %d %x: plain %v, want %v", i, raw, got, p.want)
			continue
		}
		if !p.want {
			continue
		}
		// The question ends where the records (at most one OPT) begin.
		m := new(dns.Msg)
		if err := m.Unpack(raw); err != nil {
			t.Fatal(err)
		}
		want := engine.AppendErrorReply(nil, raw, dns.RcodeServerFailure)
		if engine.WantsPadding(raw) {
			want = engine.PadReply(want, 0)
		}
		if out.Servfail[i] == nil || *out.Servfail[i] != hex.EncodeToString(want) {
			t.Errorf("SERVFAIL for %v:\n glue %v\n Go   %x", m.Question, deref(out.Servfail[i]), want)
		}
	}
	for i, p := range params {
		if deref(out.Params[i]) != deref(paramWant[i]) || (out.Params[i] == nil) != (paramWant[i] == nil) {
			t.Errorf("dnsParam(%q) = %v, want %v", p, deref(out.Params[i]), deref(paramWant[i]))
		}
	}
	for i, r := range responses {
		if want := doh.ServerTiming(r)[0]; out.Timing[i] != want {
			t.Errorf("Server-Timing for %+v: glue %q, Go %q", r, out.Timing[i], want)
		}
	}
	for i, tp := range traces {
		var hdr []string
		if tp != nil {
			hdr = strings.Split(*tp, ", ") // as several header fields reach doh
			if len(hdr) == 1 {
				hdr = []string{*tp}
			}
		}
		want := doh.NewTrace(hdr)
		got := out.Trace[i]
		wantResp := doh.TraceResponse(&want)[0]
		// The ID is random without a parent, the span always: compare the
		// rest, and that the glue made fresh ones.
		if got.HasParent != want.HasParent || len(got.Resp) != len(wantResp) || got.Resp[len(got.Resp)-2:] != wantResp[len(wantResp)-2:] {
			t.Errorf("traceparent %v: glue %+v, Go %s (parent %v)", deref(tp), got, wantResp, want.HasParent)
			continue
		}
		if want.HasParent && (got.Resp[:36] != wantResp[:36] || got.Parent != hex.EncodeToString(want.Parent[:])) {
			t.Errorf("traceparent %v: glue %+v, Go %s", deref(tp), got, wantResp)
		}
		if !want.HasParent && (got.Resp[3:35] == strings.Repeat("0", 32) || tp != nil && len(*tp) > 35 && got.Resp[3:35] == (*tp)[3:35]) {
			t.Errorf("traceparent %v: glue %+v; want a trace ID of its own", deref(tp), got)
		}
		if got.Resp[36:52] == strings.Repeat("0", 16) {
			t.Errorf("traceparent %v: glue %+v; want a span", deref(tp), got)
		}
	}
}

func ptr(s string) *string { return &s }

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
