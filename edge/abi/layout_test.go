package abi

import (
	"bytes"
	"net/netip"
	"testing"
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
