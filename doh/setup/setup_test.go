package setup

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/smallstep/pkcs7"
	"howett.net/plist"

	"github.com/dohfwd/dohfwd/doh/internal/ddr"
)

var exampleDesignation = ddr.Designation{
	Names:     []string{"dns.example.net"},
	Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.53")},
	Endpoints: []ddr.Endpoint{{Protocol: ddr.DoH, Port: 443, Path: "/dns-query"}, {Protocol: ddr.DoT, Port: 853}},
}

func TestSiteFrom(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      ddr.Designation
		host   string
		url    string
		server string
		dot    bool
	}{
		{"configured, port 443", exampleDesignation, "192.0.2.53", "https://dns.example.net/dns-query", "dns.example.net", true},
		{"configured, other port", ddr.Designation{Names: []string{"dns.example.net"}, Endpoints: []ddr.Endpoint{{Protocol: ddr.DoH, Port: 8443, Path: "/q"}}},
			"x:1", "https://dns.example.net:8443/q", "dns.example.net", false},
		{"nothing designated: the Host asked for", ddr.Designation{}, "doh.example.org", "https://doh.example.org/dns-query", "doh.example.org", false},
		{"IPv6 Host", ddr.Designation{}, "[::1]:8443", "https://[::1]:8443/dns-query", "::1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := SiteFrom(tc.d, "/dns-query", tc.host)
			if s.DoHURL != tc.url || s.Name != tc.server || s.DoT != tc.dot {
				t.Errorf("%+v", s)
			}
		})
	}
}

// The profile is a property list with every key a
// com.apple.dnsSettings.managed profile needs, pointing at the DoH URL.
func TestAppleProfileHasEveryRequiredKey(t *testing.T) {
	s := SiteFrom(exampleDesignation, "/dns-query", "")
	var p struct {
		PayloadContent []struct {
			DNSSettings struct {
				DNSProtocol     string
				ServerURL       string
				ServerName      string
				ServerAddresses []string
			}
			PayloadType        string
			PayloadIdentifier  string
			PayloadUUID        string
			PayloadVersion     int
			PayloadDisplayName string
		}
		PayloadDisplayName       string
		PayloadIdentifier        string
		PayloadType              string
		PayloadUUID              string
		PayloadVersion           int
		PayloadRemovalDisallowed bool
	}
	format, err := plist.Unmarshal(AppleProfile(s), &p)
	if err != nil {
		t.Fatal(err)
	}
	if format != plist.XMLFormat {
		t.Errorf("format %d, want XML", format)
	}
	uuid := regexp.MustCompile(`^[0-9A-F]{8}-[0-9A-F]{4}-5[0-9A-F]{3}-[89AB][0-9A-F]{3}-[0-9A-F]{12}$`)
	if p.PayloadType != "Configuration" || p.PayloadVersion != 1 || p.PayloadIdentifier != "net.example.dns.dohfwd" ||
		!uuid.MatchString(p.PayloadUUID) || p.PayloadDisplayName == "" || len(p.PayloadContent) != 1 {
		t.Fatalf("profile %+v", p)
	}
	c := p.PayloadContent[0]
	if c.PayloadType != "com.apple.dnsSettings.managed" || c.PayloadVersion != 1 || !uuid.MatchString(c.PayloadUUID) ||
		c.PayloadUUID == p.PayloadUUID || !strings.HasPrefix(c.PayloadIdentifier, p.PayloadIdentifier+".") || c.PayloadDisplayName == "" {
		t.Errorf("payload %+v", c)
	}
	if d := c.DNSSettings; d.DNSProtocol != "HTTPS" || d.ServerURL != "https://dns.example.net/dns-query" ||
		d.ServerName != "dns.example.net" || len(d.ServerAddresses) != 1 || d.ServerAddresses[0] != "192.0.2.53" {
		t.Errorf("DNSSettings %+v", d)
	}
}

// Installing the profile of one server again replaces it: its UUIDs
// depend on the DoH URL alone.
func TestProfileUUIDsAreStable(t *testing.T) {
	a := AppleProfile(SiteFrom(exampleDesignation, "/dns-query", "one"))
	b := AppleProfile(SiteFrom(exampleDesignation, "/dns-query", "two"))
	if string(a) != string(b) {
		t.Error("the same server gave two profiles")
	}
	other := AppleProfile(SiteFrom(ddr.Designation{}, "/dns-query", "other.example"))
	uuids := regexp.MustCompile(`[0-9A-F]{8}-[0-9A-F-]{27}`)
	if ua, uo := uuids.FindAllString(string(a), -1), uuids.FindAllString(string(other), -1); len(ua) != 2 || ua[0] == uo[0] || ua[1] == uo[1] {
		t.Errorf("UUIDs %v and %v", ua, uo)
	}
}

// A profile signed with a configured certificate is CMS SignedData over
// the unsigned profile that verifies against the signer's chain.
func TestSignedProfileVerifies(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, root := signingChain(t, dir)
	signer, err := LoadSigner(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Path: "/dns-query", Signer: signer}
	h.Designate(exampleDesignation)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ProfilePath, nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != ProfileContentType {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	p7, err := pkcs7.Parse(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(root)
	if err := p7.VerifyWithChain(pool); err != nil {
		t.Fatal(err)
	}
	if string(p7.Content) != string(AppleProfile(SiteFrom(exampleDesignation, "/dns-query", ""))) {
		t.Error("the signed content is not the profile")
	}
}

// signingChain writes a leaf certificate (with a CA's in the chain) and
// its key; it returns the files and the CA.
func signingChain(t *testing.T, dir string) (certFile, keyFile string, root *x509.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "profile CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	root, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "profile signer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "sign.pem"), filepath.Join(dir, "sign.key")
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	os.WriteFile(certFile, chain, 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	return certFile, keyFile, root
}

// The page shows the DoH URL and the DoT host, carries its QR code
// inline, and refers to nothing outside itself.
func TestPageIsSelfContained(t *testing.T) {
	h := &Handler{Path: "/dns-query"}
	h.Designate(exampleDesignation)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	body := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") ||
		!strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	for _, want := range []string{
		`<code id="doh-url">https://dns.example.net/dns-query</code>`,
		`<code id="dot-host">dns.example.net</code>`,
		`<svg id="qr"`, `href="/apple.mobileconfig"`,
		`id="chrome"`, `id="firefox"`, `id="android"`, `id="windows"`, `id="macos"`, `id="ios"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if m := regexp.MustCompile(`(?i)(src|href|url\()\s*=?\s*["']?(https?:)?//`).FindString(body); m != "" {
		t.Errorf("page refers outside itself: %s", m)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", rec.Code)
	}
}
