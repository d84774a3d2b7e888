package abi

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine"
)

// An event's fixed part is EventHeaderSize bytes, and an event reads back
// as written, one after another in a batch.
func TestEventsRoundTrip(t *testing.T) {
	in := []Event{
		{Kind: EventRequest, ID: 7, Data: []byte("request")},
		{Kind: EventCancel, ID: 7},
		{Kind: EventRead, ID: 3, From: netip.MustParseAddrPort("192.0.2.1:53"), Data: []byte{1, 2, 3}},
		{Kind: EventConnected, ID: 4, Code: 3},
	}
	if n := len(AppendEvent(nil, &Event{})); n != EventHeaderSize {
		t.Fatalf("an empty event is %d bytes, EventHeaderSize %d", n, EventHeaderSize)
	}
	var b []byte
	for i := range in {
		b = AppendEvent(b, &in[i])
	}
	for i, want := range in {
		got, rest, err := ParseEvent(b)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got.Kind != want.Kind || got.ID != want.ID || got.Code != want.Code || !bytes.Equal(got.Data, want.Data) ||
			(want.From.IsValid() && got.From != want.From) {
			t.Fatalf("event %d: got %+v, want %+v", i, got, want)
		}
		b = rest
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes left", len(b))
	}
	if _, _, err := ParseEvent(make([]byte, EventHeaderSize-1)); err == nil {
		t.Fatal("a cut event must not parse")
	}
}

func TestPollResultRoundTrip(t *testing.T) {
	b := AppendPollHeader(nil, 1234567890)
	if len(b) != PollHeaderSize {
		t.Fatalf("header %d bytes, PollHeaderSize %d", len(b), PollHeaderSize)
	}
	b = AppendAnswer(b, 1, []byte("one"))
	b = AppendAnswer(b, 9, nil)
	deadline, answers, err := ParsePollResult(b, nil)
	if err != nil || deadline != 1234567890 || len(answers) != 2 ||
		answers[0].ID != 1 || string(answers[0].Response) != "one" || answers[1].ID != 9 || len(answers[1].Response) != 0 {
		t.Fatalf("got %d %+v %v", deadline, answers, err)
	}
	if _, _, err := ParsePollResult(b[:len(b)-1], nil); err == nil {
		t.Fatal("a cut result must not parse")
	}
}

// dohfwd_ask's started result is a poll header: its deadline, little
// endian, in PollHeaderSize bytes; AskStarted is no QueryAnswer's length.
func TestAskStartedRoundTripAndLayout(t *testing.T) {
	b := AppendAskStarted(nil, 1234567890)
	if len(b) != PollHeaderSize || binary.LittleEndian.Uint64(b) != 1234567890 {
		t.Fatalf("started result % x", b)
	}
	if d, err := ParseAskStarted(b); err != nil || d != 1234567890 {
		t.Fatalf("read back %d, %v", d, err)
	}
	if _, err := ParseAskStarted(b[:PollHeaderSize-1]); err == nil {
		t.Fatal("a cut started result must not parse")
	}
	if AskStarted <= QueryAnswerHeaderSize+3*(1<<16) {
		t.Fatalf("AskStarted %d could be a QueryAnswer's length", AskStarted)
	}
	if QueryStart&(QueryClient|QueryTrace) != 0 {
		t.Fatal("QueryStart shares a bit with another flag")
	}
}

// An EventQuery reads back as written, with and without its client and
// trace, and its bytes are where the package comment says: the flags in
// Code, the client in the address (port 0), the trace's TraceSize bytes
// before the query.
func TestQueryEventRoundTripAndLayout(t *testing.T) {
	trace := engine.Trace{Flags: 1, HasParent: true}
	for i := range trace.ID {
		trace.ID[i] = byte(i + 1)
	}
	for i := range trace.Parent {
		trace.Parent[i], trace.Span[i] = byte(0x20+i), byte(0x40+i)
	}
	wire := []byte{0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}
	for _, q := range []Query{
		{Wire: wire},
		{Wire: wire, Client: netip.MustParseAddr("192.0.2.9")},
		{Wire: wire, Client: netip.MustParseAddr("2001:db8::9"), Trace: trace, HasTrace: true},
		{Wire: wire, Trace: trace, HasTrace: true},
		{Wire: wire, Start: true},
		{Wire: wire, Client: netip.MustParseAddr("192.0.2.9"), Trace: trace, HasTrace: true, Start: true},
	} {
		b := AppendQueryEvent(nil, 42, &q)
		e, rest, err := ParseEvent(b)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%+v: %v, %d bytes left", q, err, len(rest))
		}
		if e.Kind != EventQuery || e.ID != 42 || binary.LittleEndian.Uint32(b) != EventQuery {
			t.Fatalf("event %+v", e)
		}
		var flags uint32
		if q.Client.IsValid() {
			flags |= QueryClient
		}
		if q.HasTrace {
			flags |= QueryTrace
		}
		if q.Start {
			flags |= QueryStart
		}
		if e.Code != flags || binary.LittleEndian.Uint32(b[8:]) != flags {
			t.Fatalf("flags %d, want %d", e.Code, flags)
		}
		if q.Client.IsValid() && [16]byte(b[16:32]) != q.Client.As16() {
			t.Fatalf("client bytes % x, want %v", b[16:32], q.Client)
		}
		data := b[EventHeaderSize:]
		if q.HasTrace {
			if !bytes.Equal(data[:16], trace.ID[:]) || !bytes.Equal(data[16:24], trace.Parent[:]) ||
				!bytes.Equal(data[24:32], trace.Span[:]) || data[32] != 1 || data[33] != 1 {
				t.Fatalf("trace bytes % x", data[:TraceSize])
			}
			data = data[TraceSize:]
		}
		if !bytes.Equal(data, wire) {
			t.Fatalf("query bytes % x", data)
		}
		got, err := ParseQuery(&e)
		if err != nil || !bytes.Equal(got.Wire, wire) || got.Client != q.Client || got.HasTrace != q.HasTrace || got.Trace != q.Trace || got.Start != q.Start {
			t.Fatalf("read back %+v (%v), want %+v", got, err, q)
		}
	}
	e := Event{Kind: EventQuery, Code: QueryTrace, Data: make([]byte, TraceSize-1)}
	if _, err := ParseQuery(&e); err == nil {
		t.Fatal("a query with its trace cut must not parse")
	}
}

// A QueryAnswer carries every field of engine.Response the front end
// reads (Answered is the host's), at the offsets the package names.
func TestQueryAnswerRoundTripAndLayout(t *testing.T) {
	in := engine.Response{
		Wire: []byte{0, 1, 0x81, 0x83, 0, 1}, Rcode: 3 | 1<<4, TTL: 300, Cacheable: true,
		Result: engine.ResultNXDomain, Reason: engine.ReasonTruncated, Question: 1<<40 + 7,
		QName: "gone.example.org", Scope: "corp", Attempts: 2, Upstream: 1500 * time.Microsecond,
		CacheHit: true, Shared: true,
	}
	b := AppendQueryAnswer(nil, &in)
	if binary.LittleEndian.Uint32(b) != uint32(in.Rcode) || binary.LittleEndian.Uint32(b[4:]) != 300 ||
		binary.LittleEndian.Uint32(b[8:]) != 2 || b[12] != byte(engine.ResultNXDomain) || b[13] != byte(engine.ReasonTruncated) ||
		b[14] != QueryAnswerCacheable|QueryAnswerCacheHit|QueryAnswerShared ||
		binary.LittleEndian.Uint64(b[16:]) != in.Question || binary.LittleEndian.Uint64(b[24:]) != uint64(in.Upstream) {
		t.Fatalf("header % x", b[:QueryAnswerHeaderSize])
	}
	if n := binary.LittleEndian.Uint32(b[QueryAnswerHeaderSize:]); n != uint32(len(in.QName)) {
		t.Fatalf("QName field of %d bytes, want %d", n, len(in.QName))
	}
	got, err := ParseQueryAnswer(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Wire, in.Wire) {
		t.Fatalf("wire % x, want % x", got.Wire, in.Wire)
	}
	got.Wire, in.Wire = nil, nil
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("read back %+v, want %+v", got, in)
	}
	var zero engine.Response
	if got, err := ParseQueryAnswer(AppendQueryAnswer(nil, &zero)); err != nil || got.Rcode != 0 || got.Cacheable || len(got.Wire) != 0 {
		t.Fatalf("zero answer read back %+v, %v", got, err)
	}
	neg := engine.Response{Rcode: -1}
	if got, _ := ParseQueryAnswer(AppendQueryAnswer(nil, &neg)); got.Rcode != -1 {
		t.Fatalf("rcode -1 read back as %d", got.Rcode)
	}
	for _, cut := range []int{QueryAnswerHeaderSize - 1, len(b) - 1} {
		if _, err := ParseQueryAnswer(b[:cut]); err == nil {
			t.Fatalf("an answer cut at %d bytes must not parse", cut)
		}
	}
	if _, err := ParseQueryAnswer(append(b, 0)); err == nil {
		t.Fatal("an answer with a byte after it must not parse")
	}
}

// Hit records cross in a poll result as the field of an answer with
// PublishedID, each record a field of its own; an ask's QueryAnswer says
// records wait with QueryAnswerPublished in its flags byte (offset 14),
// which an older host's ParseQueryAnswer reads past.
func TestHitRecordsLayout(t *testing.T) {
	recs := [][]byte{[]byte("first record"), {}, []byte("third")}
	var field []byte
	for _, r := range recs {
		field = AppendHitRecord(field, r)
	}
	if binary.LittleEndian.Uint32(field) != uint32(len(recs[0])) || !bytes.Equal(field[4:4+len(recs[0])], recs[0]) {
		t.Fatalf("field % x: want a length-prefixed record first", field)
	}
	b := AppendAnswer(AppendPollHeader(nil, 5), 3, []byte("an answer"))
	b = AppendAnswer(b, PublishedID, field)
	_, answers, err := ParsePollResult(b, nil)
	if err != nil || len(answers) != 2 || answers[1].ID != 0 {
		t.Fatalf("poll result %+v, %v", answers, err)
	}
	var got [][]byte
	if err := HitRecords(answers[1].Response, func(r []byte) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) || !bytes.Equal(got[0], recs[0]) || len(got[1]) != 0 || !bytes.Equal(got[2], recs[2]) {
		t.Fatalf("records read back %q, want %q", got, recs)
	}
	if err := HitRecords(field[:len(field)-1], func([]byte) {}); err == nil {
		t.Fatal("a cut record must not read")
	}

	r := engine.Response{Rcode: 0, CacheHit: true, Wire: []byte{1, 2}}
	a := AppendQueryAnswer(nil, &r)
	if Published(a) {
		t.Fatal("an answer without MarkPublished says records wait")
	}
	MarkPublished(a)
	if !Published(a) || a[14] != QueryAnswerCacheHit|QueryAnswerPublished {
		t.Fatalf("flags byte %#x after MarkPublished", a[14])
	}
	if back, err := ParseQueryAnswer(a); err != nil || !back.CacheHit || back.Cacheable || back.Shared {
		t.Fatalf("a marked answer reads back %+v, %v", back, err)
	}
}
