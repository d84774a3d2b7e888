//go:build !wasip1

package doh

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/dohfwd/dohfwd/doh/odoh"
)

// Relay is the ODoH relay (RFC 9230 §5, the Oblivious Proxy): it
// forwards a client's message, unread and unchanged, to a target on its
// list over HTTPS (HTTP/2, its connections kept and reused), and the
// target's answer back. It logs and keeps nothing of the client: it is
// never told who the client is.
type Relay struct {
	allowed map[string]bool // lower-case host or host:port
	client  *http.Client
	timeout time.Duration
}

// RelayOptions configure a Relay.
type RelayOptions struct {
	// Targets are the targets the relay forwards to: host or host:port
	// as a client names it in targethost.
	Targets []string
	// TLS verifies the targets' certificates (RootCAs; nil: the
	// system's).
	TLS *tls.Config
	// Timeout bounds one forward (0: 5 s); the client's going away ends
	// it sooner.
	Timeout time.Duration
}

// NewRelay returns a relay to o.Targets.
func NewRelay(o RelayOptions) *Relay {
	r := &Relay{allowed: map[string]bool{}, timeout: o.Timeout}
	if r.timeout <= 0 {
		r.timeout = 5 * time.Second
	}
	for _, t := range o.Targets {
		r.allowed[strings.ToLower(t)] = true
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLS != nil {
		tc = o.TLS.Clone()
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: r.timeout,
		DialContext:         (&net.Dialer{Timeout: r.timeout}).DialContext,
		// A relay must not hand the target anything of the client: no
		// proxy from the environment either.
		Proxy: nil,
	}
	r.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	return r
}

// Allowed reports whether targetHost is on the list.
func (r *Relay) Allowed(targetHost string) bool { return r.allowed[strings.ToLower(targetHost)] }

// maxRelayed bounds a target's answer: an ODoH message holds at most a
// DNS message, its padding and a few bytes of framing.
const maxRelayed = 2*MaxMessageSize + 64

// Forward sends msg to https://targetHost/targetPath and returns what the
// client gets: 200 and the target's message; the target's own 4xx (401
// tells the client to fetch the keys again); 502 with a short reason when
// the target is unreachable, fails, or answers 2xx with anything but
// application/oblivious-dns-message.
func (r *Relay) Forward(ctx context.Context, targetHost, targetPath string, msg []byte) (int, []byte, string) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+targetHost+targetPath, bytes.NewReader(msg))
	if err != nil {
		return http.StatusBadRequest, nil, "odoh relay: bad target"
	}
	req.Header.Set("Content-Type", odoh.MediaTypeMessage)
	req.Header.Set("Accept", odoh.MediaTypeMessage)
	req.Header.Set("User-Agent", "dohfwd-odoh-relay")
	resp, err := r.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return http.StatusBadGateway, nil, "odoh relay: the target did not answer in time"
		}
		return http.StatusBadGateway, nil, "odoh relay: the target is unreachable"
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRelayed+1))
	switch {
	case err != nil:
		return http.StatusBadGateway, nil, "odoh relay: reading the target's answer failed"
	case len(body) > maxRelayed:
		return http.StatusBadGateway, nil, "odoh relay: the target's answer is too large"
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		if !isMediaType(resp.Header.Get("Content-Type"), odoh.MediaTypeMessage) {
			return http.StatusBadGateway, nil, "odoh relay: the target answered without " + odoh.MediaTypeMessage
		}
		return http.StatusOK, body, ""
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return resp.StatusCode, nil, "odoh relay: the target refused the message (" + http.StatusText(resp.StatusCode) + ")"
	}
	return http.StatusBadGateway, nil, "odoh relay: the target failed (" + resp.Status + ")"
}

// CloseIdle closes the relay's idle connections to its targets.
func (r *Relay) CloseIdle() { r.client.CloseIdleConnections() }
