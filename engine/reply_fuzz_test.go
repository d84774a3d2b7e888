package engine_test

import (
	"context"
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine"
)

// replyNet is an engine.Network whose every server sends reply for each
// query: its header's ID, and with splice also its question, taken from
// the query, so that a fuzzed reply gets past matching and into the walk,
// the cache and the client's answer.
type replyNet struct {
	reply  []byte
	splice bool
	// normalise sends each reply as miekg/dns packs it once read (sane
	// compression pointers), or nothing when it does not read.
	normalise bool

	mu        sync.Mutex
	delivered [][]byte // every reply as sent, less TCP framing
}

// readable reports whether miekg/dns reads every reply delivered.
func (n *replyNet) readable() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range n.delivered {
		if new(dns.Msg).Unpack(r) != nil {
			return false
		}
	}
	return len(n.delivered) > 0
}

func (n *replyNet) Open(t engine.Transport, _ netip.AddrPort, _ netip.Addr, _ time.Time) (engine.Socket, error) {
	return &replySocket{n: n, tcp: t == engine.TCP}, nil
}

type replySocket struct {
	n    *replyNet
	tcp  bool
	mu   sync.Mutex
	out  []byte // what is left to deliver
	sent bool
}

func (s *replySocket) Send(b []byte) error {
	if s.tcp {
		b = b[2:] // the length prefix
	}
	r := s.n.reply
	if s.n.splice && len(b) >= 12 && len(r) >= 12 {
		qend := 12 + questionLen(b[12:])
		spliced := append(append(append([]byte{}, r[:12]...), b[12:qend]...), r[12:]...)
		binary.BigEndian.PutUint16(spliced[4:], 1) // QDCOUNT
		r = spliced
	} else {
		r = append([]byte{}, r...)
	}
	if len(r) >= 2 {
		copy(r, b[:2]) // the query's ID
	}
	if s.n.normalise {
		m := new(dns.Msg)
		if m.Unpack(r) != nil {
			return nil // nothing comes back: a timeout
		}
		m.Compress = true
		var err error
		if r, err = m.Pack(); err != nil {
			return nil
		}
	}
	s.n.mu.Lock()
	s.n.delivered = append(s.n.delivered, r)
	s.n.mu.Unlock()
	if s.tcp {
		r = append(binary.BigEndian.AppendUint16(nil, uint16(len(r))), r...)
	}
	s.mu.Lock()
	s.out, s.sent = r, true
	s.mu.Unlock()
	return nil
}

func (s *replySocket) Receive(b []byte, _ time.Time) (int, netip.AddrPort, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sent || len(s.out) == 0 {
		return 0, netip.AddrPort{}, &engine.SocketError{Op: "receive", Class: engine.ErrTimeout}
	}
	n := copy(b, s.out)
	s.out = s.out[n:]
	return n, netip.MustParseAddrPort("127.0.1.1:53"), nil
}

func (s *replySocket) Close() error { return nil }

// questionLen is the length of the question at the start of b (name,
// type, class), for a query the engine packed (no compression).
func questionLen(b []byte) int {
	i := 0
	for i < len(b) && b[i] != 0 {
		i += int(b[i]) + 1
	}
	return min(i+5, len(b))
}

// FuzzUpstreamReply feeds arbitrary upstream replies to a real engine:
// matching, the wire walk, the cache and the client's answer (engine
// wire.go), asked twice so the second answer comes from the cache when the
// first was kept. It must not panic, and every answer must carry the
// client's ID and question. With mode bit 3 each reply is first read and
// packed again by miekg/dns, so its compression pointers point at names;
// such a reply must never become a client answer miekg/dns cannot read.
// (Raw replies are exempt: a pointer into a TTL field, which the engine
// rewrites, or past the last record, which it drops, is read differently
// afterwards; the engine does not follow pointers on its path.)
func FuzzUpstreamReply(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "replies", "*.bin"))
	if len(files) == 0 {
		f.Fatal("no seed replies in testdata/replies")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(0))
		f.Add(b, uint8(1))
		f.Add(b, uint8(2))
		f.Add(b, uint8(8))
		f.Add(b, uint8(8|4|1))
	}
	f.Fuzz(func(t *testing.T, reply []byte, mode uint8) {
		n := &replyNet{reply: reply, splice: mode&1 == 0, normalise: mode&8 != 0}
		e, err := engine.New(engine.Config{
			Scopes:             []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{"127.0.1.1:53"}}},
			Cache:              engine.CacheConfig{MaxEntries: 100, StaleMax: time.Hour, StaleTTL: 30 * time.Second},
			TransactionTimeout: time.Second,
		}, engine.Options{Network: n, TCPOnly: mode&2 != 0})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		q := new(dns.Msg)
		q.SetQuestion("www.example.com.", dns.TypeA)
		q.Id = 0xbeef
		if mode&4 != 0 {
			q.SetEdns0(1232, true)
			q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 12)})
		}
		raw, _ := q.Pack()
		for pass := range 2 {
			r := e.Resolve(context.Background(), raw, nil)
			upstreamReads := n.readable()
			if len(r.Wire) < 12 {
				t.Fatalf("pass %d: answer of %d bytes", pass, len(r.Wire))
			}
			if id := binary.BigEndian.Uint16(r.Wire); id != q.Id {
				t.Fatalf("pass %d: answer ID %x", pass, id)
			}
			m := new(dns.Msg)
			if err := m.Unpack(r.Wire); err != nil {
				if upstreamReads && n.normalise {
					t.Fatalf("pass %d (%v, cache hit %v): a readable reply became an unreadable answer: %v\nreplies %x\nanswer  %x",
						pass, r.Result, r.CacheHit, err, n.delivered, r.Wire)
				}
				continue
			}
			if len(m.Question) != 1 || !dns.IsFqdn(m.Question[0].Name) || m.Question[0].Qtype != dns.TypeA ||
				!equalFoldName(m.Question[0].Name, "www.example.com.") {
				t.Fatalf("pass %d: answer question %v", pass, m.Question)
			}
		}
	})
}

func equalFoldName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// An upstream reply with bytes after its last record (found by
// FuzzUpstreamReply) reaches the client without them: kept, they sat
// between the records and the client's OPT, and the answer did not read.
func TestBytesAfterLastRecordAreDropped(t *testing.T) {
	seed, err := os.ReadFile(filepath.Join("testdata", "replies", "a-two-records.bin"))
	if err != nil {
		t.Fatal(err)
	}
	n := &replyNet{reply: append(seed, 0x30, 0x30, 0x30)}
	e, err := engine.New(engine.Config{
		Scopes: []engine.ScopeConfig{{Name: "main", DefaultRoute: true, Servers: []string{"127.0.1.1:53"}}},
		Cache:  engine.CacheConfig{MaxEntries: 100},
	}, engine.Options{Network: n})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q := new(dns.Msg)
	q.SetQuestion("www.example.com.", dns.TypeA)
	q.SetEdns0(1232, false)
	raw, _ := q.Pack()
	for pass, want := range []bool{false, true} {
		r := e.Resolve(context.Background(), raw, nil)
		m := new(dns.Msg)
		if err := m.Unpack(r.Wire); err != nil || r.CacheHit != want {
			t.Fatalf("pass %d (cache hit %v): %v\n%x", pass, r.CacheHit, err, r.Wire)
		}
		if len(m.Answer) != 2 || m.IsEdns0() == nil {
			t.Fatalf("pass %d: answer %v", pass, m)
		}
	}
}
