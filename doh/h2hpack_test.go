//go:build !wasip1

package doh

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// decodeBlocks decodes blocks in order with one decoder whose table limit
// is limit (the server's view of the client's SETTINGS_HEADER_TABLE_SIZE),
// as a client does.
func decodeBlocks(t *testing.T, dec *hpack.Decoder, blk []byte) []hpack.HeaderField {
	t.Helper()
	fields, err := dec.DecodeFull(blk)
	if err != nil {
		t.Fatalf("decoding %x: %v", blk, err)
	}
	return fields
}

// TestRespEncoderDecodes: what the response encoder writes, block after
// block, decodes with x/net's HPACK decoder to the fields it was given:
// repeated fields by index, changing ones literally, through evictions
// from the dynamic table and client limits lowered to 0 and raised again.
func TestRespEncoderDecodes(t *testing.T) {
	enc := newRespEncoder()
	dec := hpack.NewDecoder(4096, nil)
	var blk []byte
	encode := func(status int, fields []HeaderField) []byte {
		blk = enc.begin(blk[:0])
		blk = enc.appendStatus(blk, status)
		for _, f := range fields {
			blk = enc.appendField(blk, f.Name, f.Value)
		}
		return blk
	}
	check := func(status int, fields []HeaderField) int {
		t.Helper()
		got := decodeBlocks(t, dec, encode(status, fields))
		want := []hpack.HeaderField{{Name: ":status", Value: itoa(status)}}
		for _, f := range fields {
			want = append(want, hpack.HeaderField{Name: f.Name, Value: f.Value})
		}
		if !slices.Equal(got, want) {
			t.Fatalf("decoded %v, want %v", got, want)
		}
		return len(blk)
	}
	answer := func(i int) []HeaderField {
		return []HeaderField{
			{"date", fmt.Sprintf("Tue, 01 Dec 2026 10:%02d:%02d GMT", i/60%60, i%60)},
			{"content-type", MediaTypeDNS},
			{"content-length", itoa(40 + i%300)},
			{"cache-control", "max-age=" + itoa(i%7)},
			{"vary", "Accept"},
			{"server-timing", fmt.Sprintf(`upstream;dur=%d.%03d;desc="ns%d"`, i%9, i%1000, i)},
			{"traceresponse", fmt.Sprintf("00-%032x-%016x-01", i, i)},
		}
	}
	first := check(200, answer(0))
	again := check(200, answer(0))
	if again >= first/2 {
		t.Errorf("the same response again took %d bytes after %d: repeated fields are not indexed", again, first)
	}
	for i := range 500 { // dates, TTLs and lengths change: entries come and go
		check([]int{200, 200, 404, 429, 500, 413}[i%6], answer(i))
	}
	// The client lowers its table to nothing: a size update, then
	// nothing indexed; then it raises it again.
	enc.setLimit(0)
	dec.SetAllowedMaxDynamicTableSize(0)
	check(200, answer(3))
	if enc.size != 0 || len(enc.ents) != 0 {
		t.Fatalf("table limit 0: the encoder holds %d bytes in %d entries", enc.size, len(enc.ents))
	}
	for i := range 20 {
		check(200, answer(i))
	}
	enc.setLimit(4096)
	dec.SetAllowedMaxDynamicTableSize(4096)
	for i := range 50 {
		check(200, answer(i))
	}
	// Fields with names in neither table, and a value too big for the
	// table.
	big := string(make([]byte, 2000))
	for i := range 5 {
		check(200, []HeaderField{{"x-content-type-options", "nosniff"}, {"x-custom", itoa(i)}, {"content-type", big}, {"allow", "GET, POST"}})
	}
}

// TestRespEncoderInts: integers across prefix boundaries (RFC 7541 C.1).
func TestRespEncoderInts(t *testing.T) {
	for _, c := range []struct {
		first byte
		n     uint
		i     uint64
		want  []byte
	}{
		{0, 5, 10, []byte{10}},
		{0, 5, 1337, []byte{31, 154, 10}},
		{0, 8, 42, []byte{42}},
		{0x80, 7, 127, []byte{0xff, 0}},
		{0x40, 6, 62, []byte{0x7e}},
		{0x40, 6, 63, []byte{0x7f, 0}},
	} {
		if got := appendHpackInt(nil, c.first, c.n, c.i); !slices.Equal(got, c.want) {
			t.Errorf("appendHpackInt(%#x, %d, %d) = %v, want %v", c.first, c.n, c.i, got, c.want)
		}
	}
}

// TestResponsesToClientWithoutHeaderTable: a client that allows no
// dynamic table (SETTINGS_HEADER_TABLE_SIZE 0) gets responses it can
// decode without one, over the HTTP/2 server; one that keeps the default
// gets the repeated fields of later responses as indices.
func TestResponsesToClientWithoutHeaderTable(t *testing.T) {
	t.Parallel()
	addr, _ := startPlainLimits(t, NewHandler(&recordingResolver{}, Options{}), Limits{})
	for _, table := range []uint32{0, 4096} {
		c := dialRaw(t, addr, http2.Setting{ID: http2.SettingHeaderTableSize, Val: table})
		dec := hpack.NewDecoder(table, nil)
		var sizes []int
		for i := range 5 {
			id := uint32(2*i + 1)
			c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(getPath(t, "t.example.")),
				EndStream: true, EndHeaders: true})
			c.flush()
			_, err := c.readUntil(5*time.Second, func(f http2.Frame) bool {
				h, ok := f.(*http2.HeadersFrame)
				if !ok || h.StreamID != id {
					return false
				}
				fields, err := dec.DecodeFull(h.HeaderBlockFragment())
				if err != nil {
					t.Fatalf("table %d, response %d: %v", table, i, err)
				}
				if len(fields) < 5 || fields[0].Value != "200" {
					t.Fatalf("table %d, response %d: %v", table, i, fields)
				}
				sizes = append(sizes, len(h.HeaderBlockFragment()))
				return true
			})
			if err != nil {
				t.Fatalf("table %d, response %d: %v", table, i, err)
			}
		}
		if table > 0 && sizes[4] >= sizes[0]/2 {
			t.Errorf("table %d: header blocks of %v bytes: later ones do not index", table, sizes)
		}
	}
}
