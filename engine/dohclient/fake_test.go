package dohclient_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The fakes a DoH client meets: realServer is Go's own HTTP/2 server (a
// well-behaved one); h2Fake speaks HTTP/2 frame by frame so that a test
// can make it misbehave the way real servers do (GOAWAY under a stream,
// replies out of order, a wrong status or content type, silence, no
// PING answer).

// answerFor is the DNS answer to the wire query q: its ID and question,
// one A record, or nil when q does not parse.
func answerFor(q []byte) []byte {
	var m dns.Msg
	if m.Unpack(q) != nil || len(m.Question) != 1 {
		return nil
	}
	r := new(dns.Msg)
	r.SetReply(&m)
	rr, _ := dns.NewRR(m.Question[0].Name + " 60 IN A 192.0.2.1")
	r.Answer = append(r.Answer, rr)
	b, _ := r.Pack()
	return b
}

// dohHandler answers RFC 8484 POSTs with answerFor.
func dohHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a := answerFor(body)
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/dns-message" || a == nil {
		http.Error(w, "bad request", 400)
		return
	}
	w.Header().Set("Content-Type", "application/dns-message")
	w.Write(a)
}

// realServer is Go's HTTP/2 server on 127.0.0.1 with cert.
type realServer struct {
	addr  netip.AddrPort
	srv   *http.Server
	conns atomic.Int32 // connections accepted
}

func startReal(t testing.TB, cert tls.Certificate, idle time.Duration) *realServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &realServer{addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	s.srv = &http.Server{
		Handler:     http.HandlerFunc(dohHandler),
		IdleTimeout: idle,
		TLSConfig:   &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}},
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.conns.Add(1)
			}
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go s.srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// fakeStream is one request the fake read whole.
type fakeStream struct {
	conn         int // the connection's number, from 1
	id           uint32
	method, path string
	ctype        string
	body         []byte
}

// fakeAction is what the fake does with a request.
type fakeAction struct {
	status int    // 0: 200
	ctype  string // "": application/dns-message
	body   []byte // nil: answerFor(the query)
	goAway bool   // GOAWAY below this stream, then close the connection
	silent bool   // no reply, and no PING answer from now on
	hold   int    // hold replies until this many are held, then send them last first
}

// h2Fake is an HTTP/2 server written frame by frame.
type h2Fake struct {
	t          testing.TB
	cert       tls.Certificate
	maxStreams uint32
	handle     func(fakeStream) fakeAction
	// idle, when set, closes a connection without streams that long
	// (GOAWAY, then the close), as servers do.
	idle time.Duration

	mu       sync.Mutex
	tlsConf  *tls.Config
	conns    int
	requests []fakeStream
	maxOpen  int // the most connections open at once
	open     int
}

// listen serves f on a loopback TLS port.
func (f *h2Fake) listen() netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func (f *h2Fake) serve(raw net.Conn) {
	defer raw.Close()
	f.mu.Lock()
	if f.tlsConf == nil {
		// One configuration for every connection: its session ticket
		// keys are what lets a client resume.
		f.tlsConf = &tls.Config{Certificates: []tls.Certificate{f.cert}, NextProtos: []string{"h2"}}
	}
	conf := f.tlsConf
	f.mu.Unlock()
	tc := tls.Server(raw, conf)
	if tc.Handshake() != nil {
		return
	}
	f.mu.Lock()
	f.conns++
	n := f.conns
	f.open++
	f.maxOpen = max(f.maxOpen, f.open)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.open--; f.mu.Unlock() }()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(tc, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(tc, tc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	ms := f.maxStreams
	if ms == 0 {
		ms = 100
	}
	fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: ms})
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	reply := func(id uint32, status int, ctype string, body []byte) {
		hbuf.Reset()
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(status)})
		enc.WriteField(hpack.HeaderField{Name: "content-type", Value: ctype})
		enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true})
		for len(body) > 16384 {
			fr.WriteData(id, false, body[:16384])
			body = body[16384:]
		}
		fr.WriteData(id, true, body)
	}
	type held struct {
		id     uint32
		status int
		ctype  string
		body   []byte
	}
	var holding []held
	streams := map[uint32]*fakeStream{}
	silent := false
	var last uint32
	for {
		if f.idle > 0 && len(streams) == 0 && len(holding) == 0 {
			tc.SetReadDeadline(time.Now().Add(f.idle))
		} else {
			tc.SetReadDeadline(time.Time{})
		}
		frame, err := fr.ReadFrame()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			fr.WriteGoAway(last, http2.ErrCodeNo, nil)
			return
		}
		if err != nil {
			return
		}
		if silent {
			continue
		}
		var done *fakeStream
		switch fm := frame.(type) {
		case *http2.SettingsFrame:
			if !fm.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !fm.IsAck() {
				fr.WritePing(true, fm.Data)
			}
		case *http2.MetaHeadersFrame:
			st := &fakeStream{conn: n, id: fm.StreamID, method: fm.PseudoValue("method"), path: fm.PseudoValue("path")}
			for _, h := range fm.RegularFields() {
				if h.Name == "content-type" {
					st.ctype = h.Value
				}
			}
			streams[fm.StreamID] = st
			if fm.StreamEnded() {
				done = st
			}
		case *http2.DataFrame:
			st := streams[fm.StreamID]
			if st == nil {
				continue
			}
			st.body = append(st.body, fm.Data()...)
			if l := len(fm.Data()); l > 0 {
				fr.WriteWindowUpdate(0, uint32(l))
				fr.WriteWindowUpdate(fm.StreamID, uint32(l))
			}
			if fm.StreamEnded() {
				done = st
			}
		}
		if done == nil {
			continue
		}
		delete(streams, done.id)
		f.mu.Lock()
		f.requests = append(f.requests, *done)
		f.mu.Unlock()
		a := f.handle(*done)
		if a.goAway {
			fr.WriteGoAway(last, http2.ErrCodeNo, nil)
			return
		}
		if a.silent {
			silent = true
			continue
		}
		last = done.id
		h := held{done.id, a.status, a.ctype, a.body}
		if h.status == 0 {
			h.status = 200
		}
		if h.ctype == "" {
			h.ctype = "application/dns-message"
		}
		if h.body == nil {
			h.body = answerFor(done.body)
		}
		if a.hold == 0 {
			reply(h.id, h.status, h.ctype, h.body)
			continue
		}
		holding = append(holding, h)
		if len(holding) >= a.hold {
			for i := len(holding) - 1; i >= 0; i-- {
				reply(holding[i].id, holding[i].status, holding[i].ctype, holding[i].body)
			}
			holding = holding[:0]
		}
	}
}

func (f *h2Fake) stats() (conns, maxOpen int, requests []fakeStream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns, f.maxOpen, append([]fakeStream(nil), f.requests...)
}
