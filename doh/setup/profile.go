package setup

import (
	"bytes"
	"crypto"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/xml"
	"errors"
	"fmt"
	"strings"

	"github.com/smallstep/pkcs7"
)

// ProfilePath is where the Apple configuration profile is served.
const ProfilePath = "/apple.mobileconfig"

// ProfileContentType is the media type Safari installs profiles from.
const ProfileContentType = "application/x-apple-aspen-config"

// AppleProfile is an unsigned configuration profile (a property list)
// with one com.apple.dnsSettings.managed payload that sends the device's
// DNS to s.DoHURL. Its UUIDs are derived from the URL, so the profile for
// one server is always the same profile, and installing it again
// replaces it rather than adding a second.
func AppleProfile(s Site) []byte {
	id := profileIdentifier(s.Name)
	var b bytes.Buffer
	b.WriteString(xml.Header)
	b.WriteString(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">` + "\n")
	b.WriteString("<plist version=\"1.0\">\n<dict>\n")
	key(&b, 1, "PayloadContent")
	b.WriteString("\t<array>\n\t\t<dict>\n")
	key(&b, 3, "DNSSettings")
	b.WriteString("\t\t\t<dict>\n")
	str(&b, 4, "DNSProtocol", "HTTPS")
	str(&b, 4, "ServerURL", s.DoHURL)
	str(&b, 4, "ServerName", s.Name)
	if len(s.Addresses) > 0 {
		key(&b, 4, "ServerAddresses")
		b.WriteString("\t\t\t\t<array>\n")
		for _, a := range s.Addresses {
			b.WriteString("\t\t\t\t\t<string>")
			xml.EscapeText(&b, []byte(a.String()))
			b.WriteString("</string>\n")
		}
		b.WriteString("\t\t\t\t</array>\n")
	}
	b.WriteString("\t\t\t</dict>\n")
	str(&b, 3, "PayloadDescription", "Sends DNS queries to "+s.DoHURL+" over HTTPS (DoH).")
	str(&b, 3, "PayloadDisplayName", "Encrypted DNS ("+s.Name+")")
	str(&b, 3, "PayloadIdentifier", id+".dns")
	str(&b, 3, "PayloadType", "com.apple.dnsSettings.managed")
	str(&b, 3, "PayloadUUID", nameUUID("payload "+s.DoHURL))
	integer(&b, 3, "PayloadVersion", 1)
	b.WriteString("\t\t</dict>\n\t</array>\n")
	str(&b, 1, "PayloadDescription", "Encrypted DNS through the dohfwd server "+s.Name+".")
	str(&b, 1, "PayloadDisplayName", "Encrypted DNS ("+s.Name+")")
	str(&b, 1, "PayloadIdentifier", id)
	b.WriteString("\t<key>PayloadRemovalDisallowed</key>\n\t<false/>\n")
	str(&b, 1, "PayloadType", "Configuration")
	str(&b, 1, "PayloadUUID", nameUUID("profile "+s.DoHURL))
	integer(&b, 1, "PayloadVersion", 1)
	b.WriteString("</dict>\n</plist>\n")
	return b.Bytes()
}

func key(b *bytes.Buffer, depth int, k string) {
	b.WriteString(strings.Repeat("\t", depth))
	b.WriteString("<key>")
	xml.EscapeText(b, []byte(k))
	b.WriteString("</key>\n")
}

func str(b *bytes.Buffer, depth int, k, v string) {
	key(b, depth, k)
	b.WriteString(strings.Repeat("\t", depth))
	b.WriteString("<string>")
	xml.EscapeText(b, []byte(v))
	b.WriteString("</string>\n")
}

func integer(b *bytes.Buffer, depth int, k string, v int) {
	key(b, depth, k)
	fmt.Fprintf(b, "%s<integer>%d</integer>\n", strings.Repeat("\t", depth), v)
}

// profileIdentifier is a reverse-DNS identifier for the server's profile:
// dns.example.net gives net.example.dns.dohfwd.
func profileIdentifier(name string) string {
	labels := strings.Split(strings.Trim(strings.ToLower(name), "."), ".")
	for i, j := 0, len(labels)-1; i < j; i, j = i+1, j-1 {
		labels[i], labels[j] = labels[j], labels[i]
	}
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, strings.Join(labels, "."))
	return id + ".dohfwd"
}

// uuidNamespace is the namespace of dohfwd's name-based UUIDs.
var uuidNamespace = [16]byte{0x5c, 0x8e, 0x3a, 0x47, 0x0d, 0x6f, 0x4b, 0x1e, 0x9a, 0x52, 0x7d, 0x0f, 0x61, 0x2c, 0xd4, 0x38}

// nameUUID is the version 5 (SHA-1, name-based) UUID of name (RFC 9562,
// section 5.5): the same name always gives the same UUID.
func nameUUID(name string) string {
	h := sha1.New()
	h.Write(uuidNamespace[:])
	h.Write([]byte(name))
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	return strings.ToUpper(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]))
}

// Signer signs profiles (CMS SignedData, RFC 5652), so that a device
// shows who made the profile; an unsigned one installs too, marked
// "Unsigned".
type Signer struct {
	leaf    *x509.Certificate
	parents []*x509.Certificate
	key     crypto.PrivateKey
}

// LoadSigner reads a PEM certificate chain (leaf first) and its key.
func LoadSigner(certFile, keyFile string) (*Signer, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("profile signing certificate: %w", err)
	}
	s := &Signer{key: pair.PrivateKey}
	for i, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("profile signing certificate %d: %w", i, err)
		}
		if i == 0 {
			s.leaf = c
		} else {
			s.parents = append(s.parents, c)
		}
	}
	if s.leaf == nil {
		return nil, errors.New("profile signing certificate: none in the file")
	}
	return s, nil
}

// Sign wraps profile in a CMS SignedData with the signer's chain.
func (s *Signer) Sign(profile []byte) ([]byte, error) {
	sd, err := pkcs7.NewSignedData(profile)
	if err != nil {
		return nil, err
	}
	sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
	if err := sd.AddSignerChain(s.leaf, s.key, s.parents, pkcs7.SignerInfoConfig{}); err != nil {
		return nil, fmt.Errorf("signing the profile: %w", err)
	}
	return sd.Finish()
}
