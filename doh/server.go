//go:build !wasip1

// The listeners are the native server's; the edge module serves requests
// its host hands it, so it carries no HTTP/2 server of its own.

package doh

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// Limits bound what one client may hold on a listener. Zero fields take
// the values of DefaultLimits.
type Limits struct {
	// MaxConcurrentStreams is how many requests one HTTP/2 connection may
	// have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
	MaxConcurrentStreams uint32
	// MaxReadFrameSize is the largest HTTP/2 frame the server reads
	// (SETTINGS_MAX_FRAME_SIZE; 16 KiB to 16 MiB).
	MaxReadFrameSize uint32
	// MaxHeaderBytes bounds request headers, the URL included
	// (SETTINGS_MAX_HEADER_LIST_SIZE in HTTP/2). A GET's dns parameter
	// must fit; bigger queries go by POST.
	MaxHeaderBytes int
	// ReadHeaderTimeout is how long a client may take to send headers;
	// ReadTimeout the whole request, body included.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout bounds writing a response; it must outlast the slowest
	// question (three 2 s attempts and some).
	WriteTimeout time.Duration
	// IdleTimeout closes connections without requests for that long
	// (HTTP/2 with a GOAWAY).
	IdleTimeout time.Duration
}

// DefaultLimits are the limits of a public DoH service: a browser keeps
// one connection with many streams; slow or idle clients are let go.
func DefaultLimits() Limits {
	return Limits{
		MaxConcurrentStreams: 250,
		MaxReadFrameSize:     16 << 10,
		MaxHeaderBytes:       16 << 10,
		ReadHeaderTimeout:    5 * time.Second,
		ReadTimeout:          10 * time.Second,
		WriteTimeout:         15 * time.Second,
		IdleTimeout:          2 * time.Minute,
	}
}

// withDefaults is l with each zero field taken from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	l.MaxConcurrentStreams = cmp.Or(l.MaxConcurrentStreams, d.MaxConcurrentStreams)
	l.MaxReadFrameSize = cmp.Or(l.MaxReadFrameSize, d.MaxReadFrameSize)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, d.MaxHeaderBytes)
	l.ReadHeaderTimeout = cmp.Or(l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	l.ReadTimeout = cmp.Or(l.ReadTimeout, d.ReadTimeout)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, d.WriteTimeout)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, d.IdleTimeout)
	return l
}

// maxUploadPerStream is the HTTP/2 flow-control window of one request:
// a body is at most one DNS message.
const maxUploadPerStream = MaxMessageSize + 1

// newServer is an http.Server with l's HTTP/1 limits and HTTP/2 from
// golang.org/x/net/http2 with l's HTTP/2 limits.
func newServer(h http.Handler, tlsConfig *tls.Config, l Limits) (*http.Server, error) {
	l = l.withDefaults()
	s := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
	err := http2.ConfigureServer(s, &http2.Server{
		MaxConcurrentStreams:     l.MaxConcurrentStreams,
		MaxReadFrameSize:         l.MaxReadFrameSize,
		IdleTimeout:              l.IdleTimeout,
		MaxUploadBufferPerStream: maxUploadPerStream,
	})
	if err != nil {
		return nil, fmt.Errorf("doh: configuring HTTP/2: %w", err)
	}
	return s, nil
}

// NewTLSServer returns a server for h that speaks HTTP/2 and HTTP/1.1 over
// TLS (ALPN h2, http/1.1), with l's limits. tlsConfig holds the
// certificates (Certificates or GetCertificate) and is not changed: the
// server gets a clone with TLS 1.2 as the least version. Serve it with
// ServeTLS(listener, "", "").
func NewTLSServer(h http.Handler, tlsConfig *tls.Config, l Limits) (*http.Server, error) {
	var c *tls.Config
	if tlsConfig != nil {
		c = tlsConfig.Clone()
	} else {
		c = new(tls.Config)
	}
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	return newServer(h, c, l)
}

// NewPlainServer returns a server for h without TLS, for use behind a TLS
// proxy: HTTP/1.1 and HTTP/2 with prior knowledge (h2c) on one port, with
// l's limits. h2c by Upgrade from HTTP/1.1 is not offered: TLS proxies
// speak h2c with prior knowledge, and an Upgrade request is simply served
// as HTTP/1.1. Serve it with Serve(listener).
func NewPlainServer(h http.Handler, l Limits) *http.Server {
	s, err := newServer(h, nil, l)
	if err != nil {
		// Only a TLS cipher-suite list can fail ConfigureServer, and there
		// is no TLS here.
		panic(err)
	}
	s.Protocols = new(http.Protocols)
	s.Protocols.SetHTTP1(true)
	s.Protocols.SetUnencryptedHTTP2(true)
	return s
}
