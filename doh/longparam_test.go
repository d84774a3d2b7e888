//go:build !wasip1

package doh

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestLongDNSParamRefusedBeforeDecoding: a GET whose dns parameter is
// longer than the base64url form of the largest DNS message (87 380
// characters for 65 535 bytes) gets 414 over HTTP/2 and HTTP/1.1, before
// anything is unescaped or decoded: this one would not even unescape (a
// bad %-escape) nor decode (characters outside base64url), and still gets
// 414, not 400. The resolver is never asked. At the longest a message can
// take, the parameter is decoded as usual (400: not a DNS message). The
// header limit is raised so that the URL reaches the core; at the
// default 16 KiB the HTTP layer refuses it first (431).
func TestLongDNSParamRefusedBeforeDecoding(t *testing.T) {
	t.Parallel()
	res := &recordingResolver{}
	addr, _ := startPlainLimits(t, NewHandler(res, Options{}), Limits{MaxHeaderBytes: 256 << 10})
	tooLong := "http://" + addr + DefaultPath + "?dns=" + strings.Repeat("!", maxParamLen) + "%zz%zz%zz"
	longest := "http://" + addr + DefaultPath + "?dns=" + strings.Repeat("A", maxParamLen)
	for _, tc := range []struct {
		name   string
		client *http.Client
	}{
		{"h2c", h2cClient(t)},
		{"HTTP/1.1", &http.Client{}},
	} {
		for _, q := range []struct {
			url  string
			want int
		}{{tooLong, http.StatusRequestURITooLong}, {longest, http.StatusBadRequest}} {
			resp, err := tc.client.Get(q.url)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != q.want {
				t.Errorf("%s, dns parameter of %d characters: %d %s, want %d", tc.name, len(q.url)-len(longest)+maxParamLen,
					resp.StatusCode, body, q.want)
			}
		}
	}
	if n := res.calls.Load(); n != 0 {
		t.Errorf("the resolver was asked %d times", n)
	}
}
