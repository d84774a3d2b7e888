package dnstap

import (
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	dnstappb "github.com/dnstap/golang-dnstap"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/dohfwd/dohfwd/engine/wiretap"
)

func testMessage(id byte) wiretap.Message {
	return wiretap.Message{Kind: wiretap.ForwarderQuery, Protocol: wiretap.UDP,
		ResponseAddr: netip.MustParseAddrPort("192.0.2.53:53"),
		Query:        []byte{0, id, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1},
		QueryTime:    time.Unix(1700000000, 5)}
}

// While the collector is away, Tap returns at once and a full queue
// drops (counted); when the collector comes, the writer reconnects and
// sends what waited, each message decoded by golang-dnstap's reader.
func TestWriterDropsWhenFullAndSendsAfterReconnect(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "tap.sock")
	w := New(Config{Network: "unix", Address: socket, Queue: 4, Identity: "test", Version: "dohfwd test", Log: zerolog.Nop()})
	defer w.Close()
	for i := range 10 {
		w.Tap(testMessage(byte(i))) // nothing reads: it must not wait
	}
	if sent, dropped := w.Counters(); sent != 0 || dropped != 6 {
		t.Fatalf("sent %d dropped %d, want 0 and 6 (a queue of 4)", sent, dropped)
	}

	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	in := dnstappb.NewFrameStreamSockInput(ln)
	frames := make(chan []byte, 16)
	go in.ReadInto(frames)
	for i := range 4 {
		var frame []byte
		select {
		case frame = <-frames:
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d did not come after the collector came back", i)
		}
		var d dnstappb.Dnstap
		if err := proto.Unmarshal(frame, &d); err != nil {
			t.Fatal(err)
		}
		m := d.GetMessage()
		if string(d.GetIdentity()) != "test" || m.GetType() != dnstappb.Message_FORWARDER_QUERY ||
			m.GetSocketProtocol() != dnstappb.SocketProtocol_UDP || m.GetResponsePort() != 53 ||
			netip.AddrFrom4([4]byte(m.GetResponseAddress())) != netip.MustParseAddr("192.0.2.53") ||
			m.GetQueryTimeSec() != 1700000000 || m.GetQueryTimeNsec() != 5 {
			t.Errorf("message %d: %v", i, &d)
		}
		if q := m.GetQueryMessage(); len(q) != 17 || q[1] != byte(i) {
			t.Errorf("message %d: query %x, want the %dth queued", i, q, i)
		}
	}
	w.Close()
	if sent, dropped := w.Counters(); sent != 4 || dropped != 6 {
		t.Errorf("sent %d dropped %d, want 4 and 6", sent, dropped)
	}
}

// The bytes Tap is given are copied: the caller reuses its buffers at once.
func TestTapCopiesTheMessage(t *testing.T) {
	w := &Writer{queue: make(chan *record, 1)}
	m := testMessage(7)
	w.Tap(m)
	m.Query[1] = 99
	r := <-w.queue
	if r.buf[1] != 7 {
		t.Fatalf("the queued query changed with the caller's buffer: %x", r.buf)
	}
}
