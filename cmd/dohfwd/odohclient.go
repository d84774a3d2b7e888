package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/dohfwd/dohfwd/doh/odoh"
)

// odohClient asks a target questions through a relay, as RFC 9230 §4
// says a client does: it fetches the target's keys, seals each query to
// them, POSTs it to the relay with the target's host and path in the
// query string, and opens the answer. Without a relay it POSTs straight
// to the target, which then sees this client's address.
type odohClient struct {
	http    *http.Client
	relay   *url.URL // nil: straight to the target
	target  *url.URL // https://host[:port]/path
	configs string   // the URL of the target's keys
	close   func()
}

// odohClientOptions are the command's flags.
type odohClientOptions struct {
	Relay, Target, Configs string
	CAFile                 string // PEM roots for the relay and the target; "" = the system's
	HTTP3                  bool
	Timeout                time.Duration
}

func newODoHClient(o odohClientOptions) (*odohClient, error) {
	target, err := parseHTTPSURL("--target", o.Target)
	if err != nil {
		return nil, err
	}
	c := &odohClient{target: target, configs: o.Configs}
	if o.Relay != "" {
		if c.relay, err = parseHTTPSURL("--relay", o.Relay); err != nil {
			return nil, err
		}
	}
	if c.configs == "" {
		c.configs = (&url.URL{Scheme: "https", Host: target.Host, Path: odoh.ConfigsPath}).String()
	} else if _, err := parseHTTPSURL("--configs", c.configs); err != nil {
		return nil, err
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca: no PEM certificate in %s", o.CAFile)
		}
	}
	var rt http.RoundTripper
	if o.HTTP3 {
		tr := &http3.Transport{TLSClientConfig: tc}
		rt, c.close = tr, func() { tr.Close() }
	} else {
		tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}
		rt, c.close = tr, tr.CloseIdleConnections
	}
	c.http = &http.Client{Transport: rt, Timeout: o.Timeout}
	return c, nil
}

// parseHTTPSURL reads an https URL with a host and a path.
func parseHTTPSURL(flag, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%s %q: want https://HOST[:PORT]/PATH", flag, s)
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u, nil
}

// Close releases the client's connections.
func (c *odohClient) Close() { c.close() }

// fetchConfig gets the target's keys and picks the first configuration
// of the suite this client speaks.
func (c *odohClient) fetchConfig(ctx context.Context) (odoh.Config, error) {
	body, err := c.do(ctx, http.MethodGet, c.configs, nil, odoh.MediaTypeConfigs)
	if err != nil {
		return odoh.Config{}, fmt.Errorf("the target's keys: %w", err)
	}
	cs, err := odoh.ParseConfigs(body)
	if err != nil {
		return odoh.Config{}, fmt.Errorf("the target's keys at %s: %w", c.configs, err)
	}
	for _, cfg := range cs {
		if cfg.Supported() {
			return cfg, nil
		}
	}
	return odoh.Config{}, fmt.Errorf("the target's keys at %s: none is DHKEM(X25519)/HKDF-SHA256/AES-128-GCM", c.configs)
}

// Exchange seals the DNS query q to cfg, sends it and returns the DNS
// answer the target sealed.
func (c *odohClient) Exchange(ctx context.Context, cfg odoh.Config, q []byte) ([]byte, error) {
	msg, pending, err := odoh.SealQuery(cfg, q, odoh.PaddingFor(len(q)))
	if err != nil {
		return nil, err
	}
	body, err := c.do(ctx, http.MethodPost, c.queryURL(), msg, odoh.MediaTypeMessage)
	if err != nil {
		return nil, err
	}
	answer, err := pending.OpenResponse(body)
	if err != nil {
		return nil, fmt.Errorf("the target's answer: %w", err)
	}
	return answer, nil
}

// queryURL is where a query is POSTed: the relay, told the target's host
// and path (RFC 9230 §5), or the target itself.
func (c *odohClient) queryURL() string {
	if c.relay == nil {
		return c.target.String()
	}
	u := *c.relay
	v := u.Query()
	v.Set("targethost", c.target.Host)
	v.Set("targetpath", c.target.Path)
	u.RawQuery = v.Encode()
	return u.String()
}

// maxAnswer bounds what the client reads of a relay's or target's
// answer: a DNS message and its padding, with room to spare.
const maxAnswer = 1 << 17

// do sends one request and returns the body of a 200 answer of media
// type want; any other answer is an error that says the status and the
// server's short reason.
func (c *odohClient) do(ctx context.Context, method, u string, body []byte, want string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", want)
	if body != nil {
		req.Header.Set("Content-Type", odoh.MediaTypeMessage)
	}
	req.Header.Set("User-Agent", "dohfwd-odoh-query/"+versionString())
	res, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s %s: %s%s", method, u, res.Status, reason(res, b))
	case len(b) > maxAnswer:
		return nil, fmt.Errorf("%s %s: the answer is over %d bytes", method, u, maxAnswer)
	case !strings.EqualFold(mediaType(res.Header.Get("Content-Type")), want):
		return nil, fmt.Errorf("%s %s: the answer is %q, not %s", method, u, res.Header.Get("Content-Type"), want)
	}
	return b, nil
}

// reason is a refusal's text, when the server sent a short one in plain
// text.
func reason(res *http.Response, body []byte) string {
	if !strings.HasPrefix(mediaType(res.Header.Get("Content-Type")), "text/") {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if len(line) > 200 {
		line = line[:200]
	}
	if line == "" {
		return ""
	}
	return ": " + line
}

func mediaType(ct string) string {
	t, _, _ := strings.Cut(ct, ";")
	return strings.TrimSpace(t)
}

// errNoAnswer is an answer that does not answer the question asked.
var errNoAnswer = errors.New("the answer is not for the question asked")
