package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"howett.net/plist"
)

// setupYAML is a configuration with DoT and the names the pages show.
func setupYAML(servers ...string) string {
	return strings.Replace(scopeYAML(servers...), "listen:\n", "listen:\n  dot: 127.0.0.1:0\n", 1) +
		"ddr:\n  names: [dns.e2e.test]\n  addresses: [127.0.0.1]\n"
}

// The setup page, opened in headless Chromium that trusts the test CA,
// shows the DoH URL and the DoT host name of the configuration, with a
// QR code that reads back as the DoH URL; the screenshot is kept as the
// test's artifact (go test -artifacts, or DOHFWD_SCREENSHOT_DIR).
func TestSetupPageInChromium(t *testing.T) {
	t.Parallel()
	chromium := needBrowserTool(t, "chromium")
	certutil := needBrowserTool(t, "certutil")
	zbarimg := needTool(t, "zbarimg")
	d := startDohfwd(t, setupYAML("127.0.0.1:1"), newPKI(t))
	_, port, _ := net.SplitHostPort(d.HTTPS)
	wantURL := "https://dns.e2e.test:" + port + "/dns-query"

	home := t.TempDir()
	trustCA(t, certutil, filepath.Join(home, ".pki", "nssdb"), d.pki.CA)
	page := "https://" + d.HTTPS + "/"
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"}

	retryBrowser(t, "chromium", func(ctx context.Context) error {
		dom, err := runBrowser(ctx, home, chromium, append(flags, "--user-data-dir="+t.TempDir(), "--dump-dom", page)...)
		if err != nil {
			return err
		}
		for _, want := range []string{
			`<code id="doh-url">` + wantURL + `</code>`,
			`<code id="dot-host">dns.e2e.test</code>`,
			`<svg id="qr"`,
		} {
			if !strings.Contains(dom, want) {
				return fmt.Errorf("the page Chromium shows lacks %s:\n%s", want, dom)
			}
		}
		return nil
	})

	shot := filepath.Join(t.ArtifactDir(), "setup-page.png")
	retryBrowser(t, "chromium", func(ctx context.Context) error {
		os.Remove(shot)
		_, err := runBrowser(ctx, home, chromium, append(flags, "--user-data-dir="+t.TempDir(),
			"--window-size=1000,1300", "--screenshot="+shot, page)...)
		if err != nil {
			return err
		}
		if _, err := os.Stat(shot); err != nil {
			return fmt.Errorf("no screenshot: %w", err)
		}
		return nil
	})
	if got := strings.TrimSpace(runTool(t, zbarimg, "--raw", "-q", shot)); got != wantURL {
		t.Errorf("the QR code in the screenshot reads %q, want %q", got, wantURL)
	}
	if dir := os.Getenv("DOHFWD_SCREENSHOT_DIR"); dir != "" {
		if png, err := os.ReadFile(shot); err == nil {
			os.WriteFile(filepath.Join(dir, "setup-page.png"), png, 0o644)
		}
	}
	t.Logf("screenshot: %s", shot)
}

// appleProfile is the part of a .mobileconfig the tests read.
type appleProfile struct {
	PayloadType    string
	PayloadUUID    string
	PayloadContent []struct {
		PayloadType string
		PayloadUUID string
		DNSSettings struct {
			DNSProtocol string
			ServerURL   string
			ServerName  string
		}
	}
}

func decodeProfile(t *testing.T, b []byte) appleProfile {
	t.Helper()
	var p appleProfile
	if _, err := plist.Unmarshal(b, &p); err != nil {
		t.Fatalf("not a property list: %v\n%s", err, b)
	}
	if p.PayloadType != "Configuration" || len(p.PayloadContent) != 1 || p.PayloadContent[0].PayloadType != "com.apple.dnsSettings.managed" {
		t.Fatalf("profile %+v", p)
	}
	return p
}

// GET /apple.mobileconfig on the DoH listener and `dohfwd profile apple`
// give the profile of the configured server; DoH requests and the JSON
// form are unaffected by the pages.
func TestAppleProfileServedAndPrinted(t *testing.T) {
	t.Parallel()
	d := startDohfwd(t, setupYAML(startNSD(t)), newPKI(t))
	_, port, _ := net.SplitHostPort(d.HTTPS)
	c := d.client()
	res, err := c.Get("https://" + d.HTTPS + "/apple.mobileconfig")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-apple-aspen-config" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	p := decodeProfile(t, body)
	if s := p.PayloadContent[0].DNSSettings; s.DNSProtocol != "HTTPS" || s.ServerURL != "https://dns.e2e.test:"+port+"/dns-query" || s.ServerName != "dns.e2e.test" {
		t.Errorf("DNSSettings %+v", s)
	}

	// A browser asking / gets the page; anyone else a 404, as before.
	req, _ := http.NewRequest(http.MethodGet, "https://"+d.HTTPS+"/", nil)
	req.Header.Set("Accept", "text/html")
	if res, err := c.Do(req); err != nil || res.StatusCode != 200 {
		t.Errorf("GET / as a browser: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	if res, err := c.Get("https://" + d.HTTPS + "/"); err != nil || res.StatusCode != 404 {
		t.Errorf("GET / without text/html: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	js := runTool(t, "curl", "-sS", "--fail", "--cacert", d.pki.CA, "-H", "accept: text/html",
		"https://"+d.HTTPS+"/resolve?name=www.e2e.test&type=A")
	if !strings.Contains(js, `"data":"127.0.0.1"`) {
		t.Errorf("JSON: %s", js)
	}

	// The command writes the profile for the ports of a configuration file.
	file := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(file, []byte("listen:\n  https: 0.0.0.0:443\nddr:\n  names: [dns.example.net]\n"), 0o644)
	out := filepath.Join(t.TempDir(), "dohfwd.mobileconfig")
	runTool(t, binary, "profile", "apple", "--config", file, "-o", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	q := decodeProfile(t, b)
	if q.PayloadContent[0].DNSSettings.ServerURL != "https://dns.example.net/dns-query" {
		t.Errorf("dohfwd profile apple: %+v", q)
	}
	again := runTool(t, binary, "profile", "apple", "--config", file)
	if again != string(b) || !regexp.MustCompile(`<string>[0-9A-F-]{36}</string>`).MatchString(again) {
		t.Error("the profile is not the same twice")
	}
}
