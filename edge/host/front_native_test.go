package host

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh/assembly"
	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/edge/moduletest"
	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/dohfwd/dohfwd/scripts/testtool/syncbuf"
)

// These tests are about the split dohfwd-edge makes: the host runs the
// DoH front end natively (package assembly's handler over the pool) and
// hands each instance only questions (abi.EventQuery).

// queryCounts reads how the one instance answered its questions.
func (e *edge) queryCounts(t *testing.T) abi.QueryCounts {
	t.Helper()
	all, err := e.pool.snapshots(context.Background())
	if err != nil || len(all) != 1 {
		t.Fatalf("status: %v %v", all, err)
	}
	return all[0].Queries
}

// parked reads how many times the one instance's goroutines parked in
// the module's own waits (abi.Status.Parked).
func (e *edge) parked(t *testing.T) uint64 {
	t.Helper()
	all, err := e.pool.snapshots(context.Background())
	if err != nil || len(all) != 1 {
		t.Fatalf("status: %v %v", all, err)
	}
	return all[0].Parked
}

// withConfig is edgeConfig with extra top-level YAML, replacing the
// sections it names.
func withConfig(base []byte, extra string) []byte {
	var out []string
	skip := false
	for _, line := range strings.Split(string(base), "\n") {
		if line != "" && line[0] != ' ' {
			key, _, _ := strings.Cut(line, ":")
			skip = strings.Contains(extra, "\n"+key+":") || strings.HasPrefix(extra, key+":")
		}
		if !skip {
			out = append(out, line)
		}
	}
	return []byte(strings.Join(out, "\n") + "\n" + extra)
}

// askedNow is how many questions the instances answered by dohfwd_ask.
func (e *edge) askedNow() uint64 {
	return e.sum(func(in *Instance) uint64 { return in.askedNow.Load() })
}

// askCalls is how many times the instances were asked by dohfwd_ask.
func (e *edge) askCalls() uint64 {
	return e.sum(func(in *Instance) uint64 { return in.askCalls.Load() })
}

// begun is how many questions the instances began on a reader at once
// (Instance.startNow), begunQueued how many they queued for a poll
// (startQueued); finishedInPlace how many of those were finished where
// the poll of their answer ran, and finishedOnWorker how many were
// answered by a poll on a reader (their reply came while the reader still
// held the instance) and finished on a worker of the front end's.
func (e *edge) begun() uint64 {
	return e.sum(func(in *Instance) uint64 { return in.begun.Load() })
}

func (e *edge) begunQueued() uint64 {
	return e.sum(func(in *Instance) uint64 { return in.begunQueued.Load() })
}

func (e *edge) finishedInPlace() uint64 {
	return e.sum(func(in *Instance) uint64 { return in.finishedInPlace.Load() })
}

func (e *edge) finishedOnWorker() uint64 {
	return e.sum(func(in *Instance) uint64 { return in.finishedOnWorker.Load() })
}

// sum adds up count over the pool's instances.
func (e *edge) sum(count func(*Instance) uint64) uint64 {
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	var n uint64
	for _, in := range e.pool.all {
		n += count(in)
	}
	return n
}

// setAsk lets the instances use dohfwd_ask (on) or, as with a module that
// lacks it, send every question by dohfwd_poll.
func (e *edge) setAsk(t *testing.T, on bool) {
	t.Helper()
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	for _, in := range e.pool.all {
		in.calling.Lock()
		in.ask = nil
		if on {
			in.ask = in.mod.ExportedFunction(abi.ExportAsk)
		}
		in.calling.Unlock()
	}
}

// A cache hit costs the module no goroutine and no poll: the host asks
// for it with dohfwd_ask and the engine answers it from memory at once
// (AnswerNow, counted AtOnce); only the miss before it did
// not (its dohfwd_ask answered nothing): it was begun by a second
// dohfwd_ask on the connection's goroutine (Pool.StartMiss,
// abi.QueryStart) and finished in the poll of its reply, on no worker
// of the module's (counted Finished) and none of the host's (finished in
// place, or on the front end's worker when its reply came while the
// reader still held the instance). The front end asks at once on the connection's goroutine, as
// it asks the native engine (Pool.AnswerNow): the hit is
// answered there. The front end marks it as natively: Server-Timing says
// cache.
func TestWazeroCacheHitAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.5"))
	e := startEdge(t, withConfig(edgeConfig(up), "cache: {max_entries: 100}\nlisten: {server_timing: true}\n"), 1)

	m, resp := e.get(t, query("hit.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.5")
	if st := resp.Header.Get("Server-Timing"); !strings.HasPrefix(st, "source;desc=upstream, attempts;desc=1") {
		t.Errorf("first answer: Server-Timing %q, want the upstream's", st)
	}
	if c := e.queryCounts(t); c != (abi.QueryCounts{Finished: 1}) {
		t.Fatalf("after the miss: %+v, want one question finished in a poll", c)
	}
	if n := e.askedNow(); n != 0 {
		t.Fatalf("after the miss: %d answered by dohfwd_ask, want 0", n)
	}
	if n, begun, finished := e.askCalls(), e.begun(), e.finishedInPlace()+e.finishedOnWorker(); n != 2 || begun != 1 || finished != 1 {
		t.Fatalf("after the miss: dohfwd_ask called %d times, %d begun, %d finished as begun; want 2 (at once, then begun), 1, 1", n, begun, finished)
	}
	m, resp = e.post(t, query("hit.example.org", dns.TypeA))
	wantAnswer(t, m, "192.0.2.5")
	if st := resp.Header.Get("Server-Timing"); st != "source;desc=cache, attempts;desc=0, upstream;dur=0" {
		t.Errorf("second answer: Server-Timing %q, want the cache's", st)
	}
	if c := e.queryCounts(t); c != (abi.QueryCounts{AtOnce: 1, Finished: 1}) {
		t.Fatalf("after the hit: %+v, want it answered at once, on no worker", c)
	}
	if n := e.askedNow(); n != 1 {
		t.Fatalf("after the hit: %d answered by dohfwd_ask, want 1", n)
	}
	if n, inline := e.askCalls(), e.pool.answeredInline.Load(); n != 3 || inline != 1 {
		t.Fatalf("after the hit: dohfwd_ask called %d times, %d answered on the connection's goroutine; want 3 and 1", n, inline)
	}
	if n := len(up.Queries()); n != 1 {
		t.Fatalf("upstream asked %d times, want once", n)
	}
	if hits := e.status(t).Counters.CacheHits; hits != 1 {
		t.Fatalf("cache hits %d, want 1", hits)
	}
}

// A hit answered by dohfwd_ask is the one a poll gives: the same reply,
// Cache-Control and Server-Timing. Without the export (a module built
// before it) the host asks every question by dohfwd_poll, hits counted
// AtOnce in their poll.
func TestWazeroAskAnswersAsThePoll(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.5"))
	e := startEdge(t, withConfig(edgeConfig(up), "cache: {max_entries: 100}\nlisten: {server_timing: true}\n"), 1)
	type answer struct{ wire, cacheControl, serverTiming string }
	ask := func() answer {
		t.Helper()
		m, resp := e.get(t, query("same.example.org", dns.TypeA))
		wire, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return answer{string(wire), resp.Header.Get("Cache-Control"), resp.Header.Get("Server-Timing")}
	}
	ask() // the miss, into the cache
	for try := 0; ; try++ {
		e.setAsk(t, true)
		before, asked0 := ask(), e.askedNow()
		e.setAsk(t, false)
		c0 := e.queryCounts(t)
		polled := ask()
		c1 := e.queryCounts(t)
		e.setAsk(t, true)
		after := ask()
		if e.askedNow() != asked0+1 {
			t.Fatalf("dohfwd_ask answered %d hits after the polled one, want 1 (the last)", e.askedNow()-asked0)
		}
		if c1.AtOnce != c0.AtOnce+1 || c1.Waited != c0.Waited {
			t.Fatalf("without dohfwd_ask the hit counted %+v → %+v, want one more AtOnce", c0, c1)
		}
		if before != after {
			// The entry's TTL fell a second in between: again.
			if try == 5 {
				t.Fatalf("two hits by dohfwd_ask differ each time: %+v, %+v", before, after)
			}
			continue
		}
		if polled != before {
			t.Fatalf("by dohfwd_poll %+v, by dohfwd_ask %+v", polled, before)
		}
		if !strings.HasPrefix(before.serverTiming, "source;desc=cache") || !strings.HasPrefix(before.cacheControl, "max-age=") {
			t.Fatalf("answer %+v: want the cache's, with its TTL", before)
		}
		break
	}
	if n := len(up.Queries()); n != 1 {
		t.Fatalf("upstream asked %d times, want once", n)
	}
}

// What the host's front end now owns behaves as in dohfwd serve: the
// JSON form, the client's rate limit (429 with Retry-After, and the
// module never asked), the client named to the module's engine for its
// share of upstream transactions (REFUSED with EDE 18 while the client's
// one transaction is held), all by the client that trusted proxies name.
func TestWazeroNativeFrontEnd(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, func(q upstreamtest.Query) upstreamtest.Action {
		if q.Msg != nil && len(q.Msg.Question) == 1 && strings.HasPrefix(strings.ToLower(q.Msg.Question[0].Name), "slow.") {
			return upstreamtest.Delay(700*time.Millisecond, upstreamtest.Answer("@ 60 IN A 192.0.2.8"))(q)
		}
		return upstreamtest.Answer("@ 60 IN A 192.0.2.8")(q)
	})
	e := startEdge(t, withConfig(edgeConfig(up), `listen: {trusted_proxies: [127.0.0.1]}
limits: {client_qps: 0.01, client_burst: 2, client_in_flight: 1}
`), 1)
	get := func(target, client string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", e.url+target, nil)
		req.Header.Set("X-Forwarded-For", client)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}

	// The JSON form, answered by the host from the module's wire reply.
	resp, body := get("/resolve?name=json.example.org&type=A", "198.51.100.1")
	var j struct {
		Status int
		Answer []struct{ Data string }
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/dns-json") ||
		json.Unmarshal(body, &j) != nil || j.Status != 0 || len(j.Answer) != 1 || j.Answer[0].Data != "192.0.2.8" {
		t.Fatalf("JSON form: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}

	// A client past its burst is refused by the host; the module is not
	// asked (the upstream reads only the admitted questions).
	before := len(up.Queries())
	codes := []int{}
	for i := range 3 {
		resp, _ := get(dnsTarget(fmt.Sprintf("rate%d.example.org", i)), "100.64.0.2")
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("statuses %v, want [200 200 429] (burst 2)", codes)
	}
	if n := len(up.Queries()) - before; n != 2 {
		t.Fatalf("upstream read %d queries for the rate-limited client, want 2", n)
	}

	// The client's one upstream transaction is held: its second question
	// at the same time is refused by the module's engine, which knows the
	// client only from the question the host handed it.
	first := make(chan *dns.Msg, 1)
	go func() { // no t.Fatal off the test's goroutine: a nil answer fails below
		req, _ := http.NewRequest("GET", e.url+dnsTarget("slow.example.org"), nil)
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		var m *dns.Msg
		if resp, err := e.client.Do(req); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m = new(dns.Msg); m.Unpack(body) != nil {
				m = nil
			}
		}
		first <- m
	}()
	for deadline := time.Now().Add(5 * time.Second); !askedFor(up, "slow.example.org."); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow question never reached the upstream")
		}
	}
	resp, body = get(dnsTarget("other.example.org"), "203.0.113.10") // same /24
	m := new(dns.Msg)
	if resp.StatusCode != 200 || m.Unpack(body) != nil || m.Rcode != dns.RcodeRefused || !hasEDE(m, dns.ExtendedErrorCodeProhibited) {
		t.Fatalf("second question while the client's transaction is held: %d\n%v", resp.StatusCode, m)
	}
	if m := <-first; m == nil || len(m.Answer) != 1 {
		t.Fatalf("the held question: %v", m)
	}
	// Another client is not held back.
	resp, _ = get(dnsTarget("free.example.org"), "192.0.2.200")
	if resp.StatusCode != 200 {
		t.Fatalf("another client: HTTP %d", resp.StatusCode)
	}
}

func dnsTarget(name string) string {
	wire, _ := query(name, dns.TypeA).Pack()
	return "/dns-query?dns=" + b64(wire)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func askedFor(up *upstreamtest.Server, name string) bool {
	for _, q := range up.Queries() {
		if q.Msg != nil && len(q.Msg.Question) == 1 && strings.EqualFold(q.Msg.Question[0].Name, name) {
			return true
		}
	}
	return false
}

// syncBuffer is the module's log, written by the goroutine calling the
// module and read by the test.
type syncBuffer = syncbuf.Buffer

// With trace context on, the host reads the client's traceparent, answers
// with traceresponse, and hands the trace to the module's engine with the
// question: the module's question event carries the client's trace ID.
func TestWazeroTraceReachesTheModule(t *testing.T) {
	t.Parallel()
	wasm, _ := moduletest.Build(t)
	var log syncBuffer
	rt, err := NewRuntime(context.Background(), wasm, Options{CacheDir: moduletest.CacheDir(t), Stderr: &log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.9"))
	cfg := withConfig(edgeConfig(up), "listen: {trace_context: true}\nlog: {level: info}\n")
	e := startEdgeOn(t, rt, cfg, 1, assembly.Options{LogTo: io.Discard}, nil)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	wire, _ := query("traced.example.org", dns.TypeA).Pack()
	req, _ := http.NewRequest("GET", e.url+"/dns-query?dns="+b64(wire), nil)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	m, resp := e.do(t, req)
	wantAnswer(t, m, "192.0.2.9")
	if tr := resp.Header.Get("traceresponse"); !strings.HasPrefix(tr, "00-"+traceID+"-") {
		t.Fatalf("traceresponse %q, want the client's trace %s", tr, traceID)
	}
	want := `"trace_id":"` + traceID + `"`
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var question string
		for _, line := range strings.Split(log.String(), "\n") {
			if strings.Contains(line, `"traced.example.org."`) && strings.Contains(line, `"duration_ms"`) {
				question = line
			}
		}
		if strings.Contains(question, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the module's question event lacks %s:\n%s", want, log.String())
		}
	}
}

// startCachingEdge starts one instance with a cache of 100 entries in
// front of an upstream that answers every question with rr, and a context
// that bounds the test's asks to 30 s.
func startCachingEdge(t *testing.T, rr string) (*edge, *upstreamtest.Server, context.Context) {
	t.Helper()
	up := upstreamtest.Start(t, upstreamtest.Answer(rr))
	e := startEdge(t, withConfig(edgeConfig(up), "cache: {max_entries: 100}\n"), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return e, up, ctx
}

// While dohfwd_ask answers nothing (names all new, or a cache that is
// off) the host asks only one question in askMissProbe, since each such
// ask is a call into the module that the poll repeats; once a probe is
// answered (the name is cached now) every question is asked again. Each
// question is answered all the same.
func TestWazeroAskBacksOffWhileItAnswersNothing(t *testing.T) {
	t.Parallel()
	e, up, ctx := startCachingEdge(t, "@ 60 IN A 192.0.2.1")
	const misses, hits = 40, 20
	for i := range misses {
		m, err := ask(ctx, e.pool, fmt.Sprintf("new%d.example.org", i))
		if err != nil || len(m.Answer) != 1 {
			t.Fatalf("new%d: %v %v", i, err, m)
		}
	}
	calls := e.askCalls()
	if most := uint64(askMissRun + (misses-askMissRun)/askMissProbe + 1); calls == 0 || calls > most {
		t.Fatalf("%d misses: dohfwd_ask called %d times, want 1 to %d", misses, calls, most)
	}
	for range hits {
		m, err := ask(ctx, e.pool, "new0.example.org")
		if err != nil || len(m.Answer) != 1 {
			t.Fatalf("new0 again: %v %v", err, m)
		}
	}
	if n := e.askedNow(); n < hits-askMissProbe-2 {
		t.Fatalf("%d hits after the misses: %d answered by dohfwd_ask, want at least %d", hits, n, hits-askMissProbe-2)
	}
	if n := len(up.Queries()); n != misses {
		t.Fatalf("upstream asked %d times, want %d", n, misses)
	}
}

// On the connection's goroutine (Pool.AnswerNow) a hit that
// finds another dohfwd_ask under way waits for it and is answered at
// once; one that finds a poll under way does not wait, and goes to a
// worker (false).
func TestWazeroImmediateWaitsForAnAskNotAPoll(t *testing.T) {
	t.Parallel()
	e, _, ctx := startCachingEdge(t, "@ 60 IN A 192.0.2.7")
	if _, err := ask(ctx, e.pool, "wait.example.org"); err != nil { // cached now
		t.Fatal(err)
	}
	wire, err := query("wait.example.org", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	in := e.pool.all[0]

	in.calling.Lock() // as a poll holds it
	held := true
	t.Cleanup(func() { // before the pool's Close, which takes it
		if held {
			in.asking.Store(false)
			in.calling.Unlock()
		}
	})
	gaveUp := make(chan bool)
	go func() {
		_, ok := e.pool.AnswerNow(wire, nil, nil, nil)
		gaveUp <- !ok
	}()
	select {
	case ok := <-gaveUp:
		if !ok {
			t.Fatal("answered at once while a poll held the instance")
		}
	case <-time.After(5 * time.Second):
		held = false
		in.calling.Unlock()
		t.Fatal("waited for a poll under way")
	}
	in.asking.Store(true) // now as an ask holds it
	answered := make(chan bool)
	go func() {
		r, ok := e.pool.AnswerNow(wire, nil, nil, nil)
		answered <- ok && r.CacheHit
	}()
	select {
	case <-answered:
		t.Fatal("did not wait for the ask under way")
	case <-time.After(50 * time.Millisecond):
	}
	in.asking.Store(false)
	held = false
	in.calling.Unlock()
	if !<-answered {
		t.Fatal("after the ask under way: not answered at once from the cache")
	}
}
