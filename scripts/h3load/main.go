// Command h3load is a DoH load generator over HTTP/3 or HTTP/2 with Go's
// clients (quic-go's http3, net/http's HTTP/2), for scripts/bench-http3.sh:
// Debian's h2load speaks HTTP/3 only when built with ngtcp2, and it is
// not. The same generator drives both versions, so their figures compare.
//
//	h3load -proto h3 -url https://127.0.0.1:8443 -paths paths.txt -n 20000 -c 4 -m 10 -ca cert.pem
//
// Each of -c connections runs -m requests at once; the GET paths (one a
// line) are asked in turn until -n are done. It prints one line:
// "requests N ok N errors N seconds S req/s R".
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	proto := flag.String("proto", "h3", "h3 or h2")
	base := flag.String("url", "", "https://HOST:PORT")
	pathsFile := flag.String("paths", "", "file of GET paths, one a line")
	n := flag.Int("n", 10000, "requests in all")
	conns := flag.Int("c", 4, "connections")
	streams := flag.Int("m", 10, "requests at once per connection")
	caFile := flag.String("ca", "", "PEM file of the CA to trust")
	flag.Parse()
	if err := run(*proto, *base, *pathsFile, *caFile, *n, *conns, *streams); err != nil {
		fmt.Fprintln(os.Stderr, "h3load:", err)
		os.Exit(1)
	}
}

func run(proto, base, pathsFile, caFile string, n, conns, streams int) error {
	paths, err := readLines(pathsFile)
	if err != nil {
		return err
	}
	tlsConf := &tls.Config{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		tlsConf.RootCAs = x509.NewCertPool()
		tlsConf.RootCAs.AppendCertsFromPEM(pem)
	}
	clients := make([]*http.Client, conns)
	for i := range clients {
		rt, err := transport(proto, tlsConf.Clone())
		if err != nil {
			return err
		}
		clients[i] = &http.Client{Transport: rt, Timeout: 10 * time.Second}
		// The connection first: handshakes are not the load measured.
		if err := get(clients[i], base+paths[0]); err != nil {
			return fmt.Errorf("first request: %w", err)
		}
	}
	var next, ok, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range clients {
		for range streams {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(n) {
						return
					}
					if get(c, base+paths[int(i)%len(paths)]) == nil {
						ok.Add(1)
					} else {
						failed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	fmt.Printf("requests %d ok %d errors %d seconds %.3f req/s %.0f\n", n, ok.Load(), failed.Load(), secs, float64(ok.Load())/secs)
	return nil
}

// transport is one connection's client: HTTP/3, or HTTP/2 on one TCP
// connection (net/http multiplexes requests on it).
func transport(proto string, tlsConf *tls.Config) (http.RoundTripper, error) {
	switch proto {
	case "h3":
		return &http3.Transport{TLSClientConfig: tlsConf}, nil
	case "h2":
		tlsConf.NextProtos = []string{"h2"}
		return &http.Transport{TLSClientConfig: tlsConf, ForceAttemptHTTP2: true, MaxConnsPerHost: 1,
			MaxIdleConnsPerHost: 1}, nil
	}
	return nil, fmt.Errorf("-proto %q: want h3 or h2", proto)
}

func get(c *http.Client, url string) error {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/dns-message")
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", res.StatusCode)
	}
	return err
}

func readLines(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sc.Text() != "" {
			out = append(out, sc.Text())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no paths", file)
	}
	return out, sc.Err()
}
