package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/dohfwd/dohfwd/engine"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/miekg/dns"
)

// wireQuery is q in wire form.
func wireQuery(t *testing.T, q *dns.Msg) []byte {
	t.Helper()
	b, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAnswerNowOnlyFromMemory: AnswerNow answers a
// cached name and a local name at once, counted as Resolve counts
// them, with the client's ID, and leaves a name it would have to ask
// upstream alone.
func TestAnswerNowOnlyFromMemory(t *testing.T) {
	t.Parallel()
	srv := upstreamtest.Start(t, upstreamtest.Answer("@ 300 IN A 192.0.2.1"))
	cfg := engine.Config{
		FallbackServers: []string{srv.String()},
		Cache:           engine.CacheConfig{MaxEntries: 1000},
		Hosts:           map[string][]string{"box.home.": {"192.0.2.9"}},
	}
	e := startEngine(t, cfg, engine.NativeNetwork{})

	dst := make([]byte, 0, 512)
	if _, ok := e.AnswerNow(wireQuery(t, queryFor("fresh.example.", dns.TypeA)), dst, nil, nil); ok {
		t.Fatal("a name never asked was answered at once")
	}
	if n := len(srv.Queries()); n != 0 || e.Counters().CacheHits != 0 {
		t.Fatalf("a miss reached the upstream (%d queries) or counted a hit", n)
	}
	if r := e.Resolve(context.Background(), wireQuery(t, queryFor("fresh.example.", dns.TypeA)), nil); r.CacheHit {
		t.Fatal("the first Resolve was a cache hit")
	}
	q := queryFor("fresh.example.", dns.TypeA)
	q.Id = 4711
	r, ok := e.AnswerNow(wireQuery(t, q), dst, nil, nil)
	if !ok || !r.CacheHit || r.Result != engine.ResultLocal || r.Rcode != dns.RcodeSuccess || !r.Cacheable {
		t.Fatalf("cached name: ok %v hit %v result %v rcode %d cacheable %v", ok, r.CacheHit, r.Result, r.Rcode, r.Cacheable)
	}
	m := new(dns.Msg)
	if err := m.Unpack(r.Wire); err != nil || m.Id != 4711 || len(m.Answer) != 1 {
		t.Fatalf("cached reply: %v %v", err, m)
	}
	if c := e.Counters(); c.CacheHits != 1 {
		t.Errorf("cache hits %d, want 1", c.CacheHits)
	}
	if r, ok := e.AnswerNow(wireQuery(t, queryFor("box.home.", dns.TypeA)), dst, nil, nil); !ok || r.Result != engine.ResultLocal {
		t.Errorf("local name: ok %v result %v", ok, r.Result)
	}
	if n := len(srv.Queries()); n != 1 {
		t.Errorf("upstream read %d queries, want 1", n)
	}
}

// TestAnswerNowNamesOutliveTheCall: AnswerNow reads
// a question's name into a buffer it reuses, so a name that is kept (the
// question event of an answer, a local answer, a miss) must be its own:
// each event names its own question after later calls reused the buffer.
func TestAnswerNowNamesOutliveTheCall(t *testing.T) {
	t.Parallel()
	srv := upstreamtest.Start(t, upstreamtest.Answer("@ 300 IN A 192.0.2.1"))
	log := new(eventLog)
	e, err := engine.New(engine.Config{
		FallbackServers: []string{srv.String()},
		Cache:           engine.CacheConfig{MaxEntries: 1000},
		Hosts:           map[string][]string{"box.home.": {"192.0.2.9"}},
	}, engine.Options{Network: engine.NativeNetwork{}, Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// A hit in lower case takes the cache's string of its name (over
	// its first reads, told to the eviction policy or not); one asked in
	// another case than cached keeps the case it was asked in.
	names := []string{"first.example.", "Second.Example.", "box.home.", "third.example."}
	for _, n := range []string{"first.example.", "second.example."} {
		e.Resolve(context.Background(), wireQuery(t, queryFor(n, dns.TypeA)), nil)
	}
	log.mu.Lock()
	log.questions = nil
	log.mu.Unlock()
	var answered []string
	for _, n := range names {
		r, ok := e.AnswerNow(wireQuery(t, queryFor(n, dns.TypeA)), nil, nil, nil)
		if want := n != "third.example."; ok != want {
			t.Fatalf("%s answered at once: %v, want %v", n, ok, want)
		}
		answered = append(answered, r.QName)
	}
	var firsts []engine.Response
	for range 40 {
		r, _ := e.AnswerNow(wireQuery(t, queryFor("first.example.", dns.TypeA)), nil, nil, nil)
		firsts = append(firsts, r)
	}
	// Later misses reuse the buffer many times over.
	for i := range 100 {
		e.AnswerNow(wireQuery(t, queryFor(fmt.Sprintf("miss%03d.example.", i), dns.TypeA)), nil, nil, nil)
	}
	if want := append(names[:3:3], ""); !slices.Equal(answered, want) {
		t.Errorf("answers name %q, want %q", answered, want)
	}
	for _, r := range firsts {
		if !r.CacheHit || r.QName != "first.example." {
			t.Fatalf("a hit for first.example.: cache hit %v, named %q", r.CacheHit, r.QName)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	var got []string
	for _, ev := range log.questions[:3] {
		got = append(got, ev.QName)
	}
	if want := names[:3]; !slices.Equal(got, want) {
		t.Errorf("question events name %q, want %q", got, want)
	}
	for _, ev := range log.questions[3:] {
		if ev.QName != "first.example." {
			t.Fatalf("a hit's question event names %q, want first.example.", ev.QName)
		}
	}
}

// TestResolveMissAnswersAsResolve: a query AnswerNow
// could not answer is handed to ResolveMiss with what it read (its
// own name, after the pooled name buffer was reused); the reply, the
// counters and the question event are Resolve's. The miss is emptied;
// one not filled (a hit, a compressed name) is not Ready and gets no
// answer.
func TestResolveMissAnswersAsResolve(t *testing.T) {
	t.Parallel()
	srv := upstreamtest.Start(t, upstreamtest.Answer("@ 300 IN A 192.0.2.1"))
	log := new(eventLog)
	e, err := engine.New(engine.Config{
		FallbackServers: []string{srv.String()},
		Cache:           engine.CacheConfig{MaxEntries: 1000},
	}, engine.Options{Network: engine.NativeNetwork{}, Observer: log})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	q := queryFor("Miss.Example.", dns.TypeA)
	q.Id = 4242
	raw := wireQuery(t, q)
	var miss engine.Miss
	if _, ok := e.AnswerNow(raw, nil, nil, &miss); ok || !miss.Ready() {
		t.Fatalf("a name never asked: answered at once %v, miss ready %v", ok, miss.Ready())
	}
	// Other misses reuse the name buffer before the miss is answered.
	for i := range 10 {
		var other engine.Miss
		e.AnswerNow(wireQuery(t, queryFor(fmt.Sprintf("other%d.example.", i), dns.TypeA)), nil, nil, &other)
	}
	r := e.ResolveMiss(context.Background(), &miss, make([]byte, 0, 512))
	if miss.Ready() {
		t.Error("the miss was not emptied")
	}
	if r.Result != engine.ResultAnswer || r.CacheHit || r.Rcode != dns.RcodeSuccess || r.TTL != 300 || !r.Cacheable ||
		r.QName != "Miss.Example." || r.Attempts != 1 {
		t.Fatalf("miss answered: %+v", r)
	}
	m := new(dns.Msg)
	if err := m.Unpack(r.Wire); err != nil || m.Id != 4242 || len(m.Answer) != 1 || m.Question[0].Name != "Miss.Example." {
		t.Fatalf("reply: %v %v", err, m)
	}
	if n := len(srv.Queries()); n != 1 {
		t.Errorf("upstream read %d queries, want 1", n)
	}
	log.mu.Lock()
	got := len(log.questions)
	var qname string
	if got > 0 {
		qname = log.questions[0].QName
	}
	log.mu.Unlock()
	if got != 1 || qname != "Miss.Example." {
		t.Errorf("%d question events (first %q), want 1 for Miss.Example.", got, qname)
	}

	// Now a hit: the miss stays empty.
	if _, ok := e.AnswerNow(raw, nil, nil, &miss); !ok || miss.Ready() {
		t.Errorf("a cached name: answered at once %v, miss ready %v", ok, miss.Ready())
	}
	// A compressed question name is not read at once: no miss either.
	compressed := wireQuery(t, queryFor("c.example.", dns.TypeA))
	compressed = append(compressed[:12:12], 0xC0, 12, 0, 1, 0, 1) // points at itself: unreadable
	if _, ok := e.AnswerNow(compressed, nil, nil, &miss); ok || miss.Ready() {
		t.Errorf("a compressed name: answered at once %v, miss ready %v", ok, miss.Ready())
	}
	if r := e.ResolveMiss(context.Background(), &miss, nil); r.Rcode != -1 || len(r.Wire) != 0 {
		t.Errorf("an empty miss: rcode %d, %d bytes", r.Rcode, len(r.Wire))
	}
}
