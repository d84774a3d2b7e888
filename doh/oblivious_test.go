//go:build !wasip1

package doh

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/doh/odoh"
	"github.com/dohfwd/dohfwd/engine"
)

// clientRecorder is a resolver that remembers the client and the proto
// each question was resolved for.
type clientRecorder struct {
	recordingResolver
	mu      sync.Mutex
	clients []netip.Addr
	protos  []string
}

func (r *clientRecorder) Resolve(ctx context.Context, query, dst []byte) engine.Response {
	r.mu.Lock()
	r.clients = append(r.clients, engine.ClientOf(ctx))
	r.protos = append(r.protos, engine.ProtoFrom(ctx))
	r.mu.Unlock()
	return r.recordingResolver.Resolve(ctx, query, dst)
}

func testRing(t testing.TB) *odoh.Keyring {
	ring, err := odoh.NewRandomKeyring(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// fetchConfig gets a target's first configuration.
func fetchConfig(t testing.TB, c *http.Client, base string) odoh.Config {
	t.Helper()
	resp, body := do(t, c, newRequest(t, "GET", base+odoh.ConfigsPath, nil))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != odoh.MediaTypeConfigs {
		t.Fatalf("configs: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	cs, err := odoh.ParseConfigs(body)
	if err != nil {
		t.Fatal(err)
	}
	return cs[0]
}

func postODoH(t testing.TB, c *http.Client, url string, msg []byte) (*http.Response, []byte) {
	return do(t, c, newRequest(t, "POST", url, msg, "Content-Type", odoh.MediaTypeMessage))
}

// TestObliviousTargetAnswersSealed: over this package's HTTP/2 server, a
// query sealed to the keys at /.well-known/odohconfigs is resolved for
// no client with proto odoh and answered sealed, never cached; the
// exchange says odoh.
func TestObliviousTargetAnswersSealed(t *testing.T) {
	res := &clientRecorder{}
	var seen exchanges
	base, c := startTLS(t, NewHandler(res, Options{Oblivious: testRing(t), Observe: seen.observe}), Limits{})
	cfg := fetchConfig(t, c, base)
	q := pack(t, query(t, "odoh.example.", dns.TypeA, 0x4242))
	msg, pq, err := odoh.SealQuery(cfg, q, 0)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := postODoH(t, c, base+DefaultPath, msg)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != odoh.MediaTypeMessage ||
		resp.Header.Get("Cache-Control") != "no-cache, no-store" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if bytes.Contains(body, []byte("odoh\x07example")) || bytes.Contains(body, []byte{192, 0, 2, 7}) {
		t.Fatal("the answer went in plain")
	}
	wire, err := pq.OpenResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	var m dns.Msg
	if err := m.Unpack(wire); err != nil || m.Id != 0x4242 || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.7" {
		t.Fatalf("answer %v %v", &m, err)
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	if len(res.clients) != 1 || res.clients[0].IsValid() || res.protos[0] != ProtoODoH {
		t.Fatalf("resolved for clients %v protos %v: want none and odoh", res.clients, res.protos)
	}
	if x := seen.last(t); x.Format != FormatOblivious || x.ODoHFailure != "" || x.Status != 200 || x.QName != "odoh.example." {
		t.Fatalf("exchange %+v", x)
	}
}

// TestObliviousTargetRefusals: what the target cannot open gets the
// status of RFC 9230 §7 and a reason for the metrics; the resolver is
// never asked, and nothing of the query comes back.
func TestObliviousTargetRefusals(t *testing.T) {
	res := &recordingResolver{}
	var seen exchanges
	base, c := startTLS(t, NewHandler(res, Options{Oblivious: testRing(t), Observe: seen.observe}), Limits{})
	cfg := fetchConfig(t, c, base)
	q := pack(t, query(t, "secret.example.", dns.TypeA, 1))
	good, _, _ := odoh.SealQuery(cfg, q, 0)
	foreign, _, _ := odoh.SealQuery(fetchConfigOf(t, testRing(t)), q, 0)
	tampered := bytes.Clone(good)
	tampered[len(tampered)-3] ^= 0x40
	response := bytes.Clone(good)
	response[0] = odoh.MessageResponse
	for _, tc := range []struct {
		name   string
		msg    []byte
		status int
		reason string
	}{
		{"unknown key", foreign, 401, ODoHUnknownKey},
		{"bad tag", tampered, 400, ODoHDecrypt},
		{"response type", response, 400, ODoHMessageType},
		{"garbage", []byte{1, 2, 3}, 400, ODoHMalformed},
	} {
		resp, body := postODoH(t, c, base+DefaultPath, tc.msg)
		x := seen.last(t)
		if resp.StatusCode != tc.status || x.ODoHFailure != tc.reason || bytes.Contains(body, []byte("secret")) {
			t.Errorf("%s: status %d reason %q body %q", tc.name, resp.StatusCode, x.ODoHFailure, body)
		}
	}
	if n := res.calls.Load(); n != 0 {
		t.Fatalf("the resolver was asked %d times", n)
	}
	// Without the target on, the path is plain DoH's: 415.
	base2, c2 := startTLS(t, NewHandler(res, Options{}), Limits{})
	if resp, _ := postODoH(t, c2, base2+DefaultPath, good); resp.StatusCode != 415 {
		t.Fatalf("ODoH to a plain DoH server: %d", resp.StatusCode)
	}
	if resp, _ := do(t, c2, newRequest(t, "GET", base2+odoh.ConfigsPath, nil)); resp.StatusCode != 404 {
		t.Fatalf("configs of a plain DoH server: %d", resp.StatusCode)
	}
}

// TestObliviousFailureStatuses states the rule: 401 for an unknown key,
// 400 for every other failure (RFC 9230 §7).
func TestObliviousFailureStatuses(t *testing.T) {
	for err, want := range map[error]int{odoh.ErrUnknownKey: 401, odoh.ErrDecrypt: 400, odoh.ErrPadding: 400,
		odoh.ErrMessageType: 400, odoh.ErrMalformed: 400, errors.New("other"): 400} {
		if got, _, _ := obliviousFailure(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}

func fetchConfigOf(t testing.TB, r *odoh.Keyring) odoh.Config {
	cs, err := odoh.ParseConfigs(r.Configs())
	if err != nil {
		t.Fatal(err)
	}
	return cs[0]
}

// TestRelayForwards: the relay forwards a message unchanged to an
// allowed target over HTTP/2 and returns its answer; a target off the
// list is 403, one that answers 2xx without the ODoH media type or
// cannot be reached is 502; the target's 401 comes through.
func TestRelayForwards(t *testing.T) {
	_, pool := testCert()
	targetBase, _ := startTLS(t, NewHandler(&recordingResolver{}, Options{Oblivious: testRing(t)}), Limits{})
	targetHost := strings.TrimPrefix(targetBase, "https://")
	var protos []string
	var mu sync.Mutex
	wrong := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("hello"))
	}))
	wrong.EnableHTTP2 = true
	var conns int
	wrong.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	cert, _ := testCert()
	wrong.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	wrong.StartTLS()
	t.Cleanup(wrong.Close)
	wrongHost := strings.TrimPrefix(wrong.URL, "https://")
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadHost := dead.Addr().String()
	dead.Close()

	relay := NewRelay(RelayOptions{Targets: []string{targetHost, wrongHost, deadHost}, TLS: &tls.Config{RootCAs: pool}})
	t.Cleanup(relay.CloseIdle)
	var seen exchanges
	base, c := startTLS(t, NewHandler(&recordingResolver{}, Options{Relay: relay, Observe: seen.observe}), Limits{})

	// The target's keys, fetched directly (a client learns them so).
	_, direct := startTLS(t, http.NotFoundHandler(), Limits{})
	cfg := fetchConfig(t, direct, targetBase)
	q := pack(t, query(t, "relayed.example.", dns.TypeA, 7))
	msg, pq, _ := odoh.SealQuery(cfg, q, 0)
	url := func(host string) string {
		return base + RelayPath + "?targethost=" + host + "&targetpath=" + DefaultPath
	}
	resp, body := postODoH(t, c, url(targetHost), msg)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != odoh.MediaTypeMessage {
		t.Fatalf("relayed: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if wire, err := pq.OpenResponse(body); err != nil || len(wire) < 12 {
		t.Fatalf("relayed answer: %v", err)
	}
	if x := seen.last(t); !x.Relayed || x.Format != FormatOblivious || x.QName != "" {
		t.Fatalf("relay exchange %+v", x)
	}
	for _, tc := range []struct {
		host   string
		status int
	}{{"elsewhere.example", 403}, {wrongHost, 502}, {wrongHost, 502}, {deadHost, 502}} {
		if resp, body := postODoH(t, c, url(tc.host), msg); resp.StatusCode != tc.status {
			t.Errorf("%s: %d %q, want %d", tc.host, resp.StatusCode, body, tc.status)
		}
	}
	mu.Lock()
	if len(protos) != 2 || protos[0] != "HTTP/2.0" || conns != 1 {
		t.Errorf("the relay reached the target with %v over %d connections, want HTTP/2.0 twice over one", protos, conns)
	}
	mu.Unlock()
	// A key the target does not hold: its 401 comes through the relay.
	foreign, _, _ := odoh.SealQuery(fetchConfigOf(t, testRing(t)), q, 0)
	if resp, _ := postODoH(t, c, url(targetHost), foreign); resp.StatusCode != 401 {
		t.Errorf("unknown key through the relay: %d, want 401", resp.StatusCode)
	}
	if resp, _ := do(t, c, newRequest(t, "GET", url(targetHost), nil)); resp.StatusCode != 405 {
		t.Errorf("GET to the relay: %d, want 405", resp.StatusCode)
	}
	if resp, _ := postODoH(t, c, base+RelayPath+"?targethost="+targetHost, msg); resp.StatusCode != 400 {
		t.Errorf("no targetpath: %d, want 400", resp.StatusCode)
	}
}
