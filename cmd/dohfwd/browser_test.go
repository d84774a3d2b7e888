package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// Real browsers load a page on a name that only the test upstream knows,
// resolving it through dohfwd's DoH URL: Chromium in secure DoH mode and
// Firefox ESR in TRR mode 3. Neither falls back to system DNS, so the page
// loads only if DoH works, with the certificate verified against a test CA
// the browser trusts through its own NSS database. The same isolation keeps
// the browsers off the internet: every name they look up goes to dohfwd,
// whose only upstream is the local nsd.

// browserRunTimeout bounds one browser run; a flaky run is retried once
// while the test's budget allows.
const browserRunTimeout = 45 * time.Second

// browserBudget bounds each browser's part of the test, retries included.
const browserBudget = 60 * time.Second

// browserSetupMarker is left by scripts/setup.d/60-browsers.sh when it
// could not install the browsers.
var browserSetupMarker = filepath.Join(os.TempDir(), "dohfwd-setup-60-browsers.failed")

func TestBrowsersLoadPageThroughDoH(t *testing.T) {
	t.Parallel()
	chromium := needBrowserTool(t, "chromium")
	firefox := needBrowserTool(t, "firefox-esr")
	certutil := needBrowserTool(t, "certutil")

	domain := "browser-" + randomHex(t, 6) + ".test."
	needTool(t, "nsd") // missing, it fails: make test installs it
	upstream := upstreamtest.StartNSD(t, upstreamtest.Zone{Origin: domain, Text: fmt.Sprintf(`$ORIGIN %[1]s
$TTL 300
@ IN SOA ns.%[1]s admin.%[1]s 1 3600 600 86400 120
@ IN NS ns
ns IN A 127.0.0.1
chromium IN A 127.0.0.1
firefox IN A 127.0.0.1
`, domain)})
	pki := newPKI(t)
	d := startDohfwd(t, scopeYAML(upstream), pki)
	pages := startPageServer(t)

	t.Run("chromium", func(t *testing.T) {
		t.Parallel()
		host := "chromium." + strings.TrimSuffix(domain, ".")
		token := chromiumLoads(t, chromium, certutil, d, pages, host, "--disable-quic")
		pages.mustHaveServed(t, host, token)
		mustHaveAnsweredOverDoH(t, d, host)
	})

	t.Run("firefox", func(t *testing.T) {
		t.Parallel()
		host := "firefox." + strings.TrimSuffix(domain, ".")
		token := pages.tokenFor(host)
		url := fmt.Sprintf("http://%s:%d/", host, pages.port)

		home := t.TempDir()
		profile := t.TempDir()
		trustCA(t, certutil, profile, pki.CA)
		if err := os.WriteFile(filepath.Join(profile, "user.js"), []byte(firefoxPrefs(d.URL())), 0o644); err != nil {
			t.Fatal(err)
		}
		shot := filepath.Join(t.TempDir(), "firefox.png")
		retryBrowser(t, "firefox-esr", func(ctx context.Context) error {
			os.Remove(shot)
			out, err := runBrowser(ctx, home, firefox,
				"--headless", "--no-remote", "--profile", profile,
				"--window-size=800,600", "--screenshot", shot, url)
			if err != nil {
				return err
			}
			if err := checkScreenshot(shot); err != nil {
				return fmt.Errorf("%w\nfirefox output:\n%s", err, out)
			}
			return nil
		})
		pages.mustHaveServed(t, host, token)
		mustHaveAnsweredOverDoH(t, d, host)
		// To look at the screenshot: DOHFWD_SCREENSHOT_DIR=/some/dir go test -run TestBrowsers.
		if dir := os.Getenv("DOHFWD_SCREENSHOT_DIR"); dir != "" {
			if png, err := os.ReadFile(shot); err == nil {
				os.WriteFile(filepath.Join(dir, "firefox.png"), png, 0o644)
			}
		}
	})
}

// needBrowserTool finds a tool of the browser test; missing, it fails the
// test under CI and skips it loudly elsewhere (testtool.Find), saying why
// scripts/setup.d/60-browsers.sh could not install it when it tried.
func needBrowserTool(t *testing.T, name string) string {
	t.Helper()
	how := "scripts/setup.d/60-browsers.sh installs it"
	if why, err := os.ReadFile(browserSetupMarker); err == nil {
		how = "scripts/setup.d/60-browsers.sh could not install it: " + strings.TrimSpace(string(why))
	}
	return testtool.Find(t, name, how+"; dohfwd is NOT tested with real browsers")
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// pageServer is the local web site the browsers visit: each host gets a
// page with its own token and an image whose URL carries the token, so a
// request for the image proves a browser parsed that page.
type pageServer struct {
	port int

	mu       sync.Mutex
	tokens   map[string]string // host (no port) → token
	requests []pageRequest
}

type pageRequest struct{ Host, Path string }

// pageColor fills the page, so a screenshot of it is told apart from an
// error page.
var pageColor = color.RGBA{0x1e, 0x6b, 0x3a, 0xff}

func startPageServer(t *testing.T) *pageServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pageServer{port: ln.Addr().(*net.TCPAddr).Port, tokens: map[string]string{}}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

func (p *pageServer) tokenFor(host string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	tok := "token-" + rand.Text()
	p.tokens[host] = tok
	return tok
}

func (p *pageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	p.mu.Lock()
	p.requests = append(p.requests, pageRequest{Host: r.Host, Path: r.URL.Path})
	token, ok := p.tokens[host]
	p.mu.Unlock()
	switch {
	case !ok:
		http.NotFound(w, r)
	case r.URL.Path == "/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html>
<html><head><title>dohfwd browser test</title></head>
<body style="margin:0;background:#%02x%02x%02x;color:#fff;font:28px sans-serif;height:100vh;padding:16px;box-sizing:border-box">
<p id="token">%s</p><p>%s resolved through dohfwd</p>
<img src="/seen/%s.png" width="16" height="16" alt="">
</body></html>
`, pageColor.R, pageColor.G, pageColor.B, token, host, token)
	case r.URL.Path == "/seen/"+token+".png":
		w.Header().Set("Content-Type", "image/png")
		img := image.NewRGBA(image.Rect(0, 0, 16, 16))
		for i := range img.Pix {
			img.Pix[i] = 0xff
		}
		png.Encode(w, img)
	default:
		http.NotFound(w, r)
	}
}

// mustHaveServed checks that a browser fetched host's page and then the
// image named by its token.
func (p *pageServer) mustHaveServed(t *testing.T, host, token string) {
	t.Helper()
	want := map[string]bool{"/": false, "/seen/" + token + ".png": false}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.requests {
		if h, _, _ := net.SplitHostPort(r.Host); h == host {
			if _, ok := want[r.Path]; ok {
				want[r.Path] = true
			}
		}
	}
	for path, seen := range want {
		if !seen {
			t.Errorf("the page server never got %s for %s; requests: %v", path, host, p.requests)
		}
	}
}

// mustHaveAnsweredOverDoH checks dohfwd's log: the A question for host was
// asked (only the DoH listener is on) and answered.
func mustHaveAnsweredOverDoH(t *testing.T, d *dohfwd, host string) {
	t.Helper()
	qname := host + "."
	answered := d.Events(func(ev map[string]any) bool {
		return ev["message"] == "question" && ev["qname"] == qname && ev["qtype"] == "A" && ev["result"] == "answer"
	})
	if len(answered) == 0 {
		t.Errorf("dohfwd logged no answered A question for %s; its questions: %v", qname,
			d.Events(func(ev map[string]any) bool { return ev["message"] == "question" }))
	}
}

// trustCA makes the NSS database in dir (created if need be) trust the CA
// for TLS servers.
func trustCA(t *testing.T, certutil, dir, ca string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	db := "sql:" + dir
	if _, err := os.Stat(filepath.Join(dir, "cert9.db")); err != nil {
		runTool(t, certutil, "-N", "-d", db, "--empty-password")
	}
	runTool(t, certutil, "-A", "-d", db, "-t", "C,,", "-n", "dohfwd test CA", "-i", ca)
}

// firefoxPrefs is a profile's user.js: DNS only through dohfwd (TRR mode
// 3, no confirmation probe), and the services that would otherwise phone
// home or slow the start off.
func firefoxPrefs(dohURL string) string {
	prefs := []struct {
		name  string
		value any
	}{
		{"network.trr.mode", 3},
		{"network.trr.uri", dohURL},
		{"network.trr.custom_uri", dohURL},
		{"network.trr.allow-rfc1918", true},
		{"network.trr.confirmationNS", "skip"},
		{"network.captive-portal-service.enabled", false},
		{"network.connectivity-service.enabled", false},
		{"dom.security.https_first", false},
		{"dom.security.https_first_schemeless", false},
		{"toolkit.telemetry.enabled", false},
		{"toolkit.telemetry.unified", false},
		{"datareporting.policy.dataSubmissionEnabled", false},
		{"datareporting.healthreport.uploadEnabled", false},
		{"app.normandy.enabled", false},
		{"app.update.auto", false},
		{"extensions.update.enabled", false},
		{"browser.safebrowsing.malware.enabled", false},
		{"browser.safebrowsing.phishing.enabled", false},
		{"browser.shell.checkDefaultBrowser", false},
		{"browser.aboutwelcome.enabled", false},
		{"browser.startup.homepage_override.mstone", "ignore"},
		{"browser.newtabpage.activity-stream.feeds.topsites", false},
	}
	var b strings.Builder
	for _, p := range prefs {
		switch v := p.value.(type) {
		case string:
			fmt.Fprintf(&b, "user_pref(%q, %q);\n", p.name, v)
		default:
			fmt.Fprintf(&b, "user_pref(%q, %v);\n", p.name, v)
		}
	}
	return b.String()
}

// checkScreenshot decodes the PNG and checks that it shows the test page:
// most of it in the page's colour, which no error page has.
func checkScreenshot(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return fmt.Errorf("screenshot %s: %w", path, err)
	}
	b := img.Bounds()
	if b.Dx() < 100 || b.Dy() < 100 {
		return fmt.Errorf("screenshot %s is %dx%d", path, b.Dx(), b.Dy())
	}
	match := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == uint32(pageColor.R) && g>>8 == uint32(pageColor.G) && bl>>8 == uint32(pageColor.B) {
				match++
			}
		}
	}
	if share := float64(match) / float64(b.Dx()*b.Dy()); share < 0.5 {
		return fmt.Errorf("screenshot %s: %.0f%% of it in the page's colour, want most: not the test page", path, 100*share)
	}
	return nil
}

// retryBrowser runs a browser up to twice within browserBudget: headless
// browsers now and then hang at start or exit early on a busy machine.
func retryBrowser(t *testing.T, name string, run func(ctx context.Context) error) {
	t.Helper()
	budget := time.Now().Add(browserBudget)
	var errs []error
	for try := 1; try <= 2; try++ {
		left := time.Until(budget)
		if left < 10*time.Second {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(browserRunTimeout, left))
		err := run(ctx)
		cancel()
		if err == nil {
			if try > 1 {
				t.Logf("%s worked on try %d after: %v", name, try, errors.Join(errs...))
			}
			return
		}
		errs = append(errs, fmt.Errorf("try %d: %w", try, err))
	}
	t.Fatalf("%s did not load the page through dohfwd:\n%v", name, errors.Join(errs...))
}

// runBrowser runs a browser with a private HOME until it exits or ctx
// ends, and returns its stdout, with stderr on error. The whole process
// group goes when the run ends: browsers leave helpers behind.
func runBrowser(ctx context.Context, home, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "MOZ_HEADLESS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Start()
	if err == nil {
		err = cmd.Wait()
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out: %w", ctx.Err())
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), err, out.Bytes(), tail(errb.String(), 4000))
	}
	return out.String(), nil
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// chromiumLoads has headless Chromium, in secure DoH mode with d's URL as
// its only resolver and trusting d's CA, load pages' page for host (quic
// says how it may use QUIC), and returns the page's token once the DOM
// holds it.
func chromiumLoads(t *testing.T, chromium, certutil string, d *dohfwd, pages *pageServer, host string, quic ...string) string {
	t.Helper()
	token := pages.tokenFor(host)
	url := fmt.Sprintf("http://%s:%d/", host, pages.port)
	home := t.TempDir()
	trustCA(t, certutil, filepath.Join(home, ".pki", "nssdb"), d.pki.CA)
	profile := t.TempDir()
	localState := fmt.Sprintf(`{"dns_over_https":{"mode":"secure","templates":%q}}`, d.URL())
	if err := os.WriteFile(filepath.Join(profile, "Local State"), []byte(localState), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu"}, quic...)
	args = append(args, "--no-first-run", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--user-data-dir="+profile, "--dump-dom", url)
	retryBrowser(t, "chromium", func(ctx context.Context) error {
		dom, err := runBrowser(ctx, home, chromium, args...)
		if err != nil {
			return err
		}
		if !strings.Contains(dom, token) {
			return fmt.Errorf("--dump-dom of %s lacks the page's token %q:\n%s", url, token, dom)
		}
		return nil
	})
	return token
}
