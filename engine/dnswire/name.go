package dnswire

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"strings"
)

// Name limits (RFC 1035 §2.3.4).
const (
	MaxNameLen  = 255 // octets of a name in wire form
	MaxLabelLen = 63
	// maxPointers bounds the compression pointers one name follows, as
	// miekg/dns does: enough for any name, and no loop runs forever.
	maxPointers = (MaxNameLen+1)/2 - 2
)

// Errors of names and messages.
var (
	ErrShort    = errors.New("dnswire: message cut short")
	ErrName     = errors.New("dnswire: bad domain name")
	ErrLongName = errors.New("dnswire: domain name longer than 255 octets")
	ErrPointers = errors.New("dnswire: too many compression pointers")
	ErrFqdn     = errors.New("dnswire: domain name not fully qualified")
)

// SkipName returns the offset just past the name at off, or -1 when it
// runs past the message or uses a reserved label type. A compression
// pointer ends a name; its target is only bounds-checked (it must point
// back), since nothing here follows it.
func SkipName(m []byte, off int) int { return skipName(m, off, true) }

// skipAnyName is SkipName for a reader that follows pointers where they
// lead (AppendNameWire, with its hop limit): a pointer is only checked to
// land inside the message.
func skipAnyName(m []byte, off int) int { return skipName(m, off, false) }

func skipName(m []byte, off int, back bool) int {
	for {
		if off >= len(m) {
			return -1
		}
		l := int(m[off])
		switch l & 0xC0 {
		case 0x00:
			if l == 0 {
				return off + 1
			}
			off += 1 + l
		case 0xC0:
			if off+2 > len(m) {
				return -1
			}
			// Pointers point back, or the name is garbage; every
			// pointer must at least land in the message.
			if to := int(binary.BigEndian.Uint16(m[off:]) & 0x3FFF); back && to >= off || to >= len(m) {
				return -1
			}
			return off + 2
		default:
			return -1
		}
	}
}

// AppendNameWire appends the name at m[off:] to dst in wire form with its
// compression pointers followed, and returns the offset just past the name
// where it sits in m.
func AppendNameWire(dst, m []byte, off int) ([]byte, int, error) {
	start, next, pointers := len(dst), -1, 0
	for {
		if off >= len(m) {
			return dst, 0, ErrShort
		}
		c := int(m[off])
		switch c & 0xC0 {
		case 0x00:
			if off+1+c > len(m) {
				return dst, 0, ErrShort
			}
			if len(dst)-start+1+c > MaxNameLen {
				return dst, 0, ErrLongName
			}
			dst = append(dst, m[off:off+1+c]...)
			off += 1 + c
			if c == 0 {
				if next < 0 {
					next = off
				}
				return dst, next, nil
			}
		case 0xC0:
			if off+2 > len(m) {
				return dst, 0, ErrShort
			}
			if next < 0 {
				next = off + 2
			}
			if pointers++; pointers > maxPointers {
				return dst, 0, ErrPointers
			}
			off = int(binary.BigEndian.Uint16(m[off:]) & 0x3FFF)
		default:
			return dst, 0, ErrName // 0x40 and 0x80 are reserved
		}
	}
}

// UnpackName is the presentation form of the name at m[off:] (compression
// followed) and the offset just past it, as miekg/dns's UnpackDomainName.
func UnpackName(m []byte, off int) (string, int, error) {
	var buf [MaxNameLen]byte
	wire, next, err := AppendNameWire(buf[:0], m, off)
	if err != nil {
		return "", 0, err
	}
	var text [4 * MaxNameLen]byte
	return string(AppendNameText(text[:0], wire)), next, nil
}

// AppendNameText appends the presentation form of the uncompressed wire
// name wire ("." for the root): special characters escaped with a
// backslash, other bytes outside printable ASCII as \DDD (the form
// miekg/dns writes, so logs and routes see the same text).
func AppendNameText(dst, wire []byte) []byte {
	start := len(dst)
	for off := 0; off < len(wire); {
		l := int(wire[off])
		if l == 0 || off+1+l > len(wire) {
			break
		}
		for _, c := range wire[off+1 : off+1+l] {
			switch {
			case !needsEscape[c]:
				dst = append(dst, c)
			case c < ' ' || c > '~':
				dst = append(dst, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
			default:
				dst = append(dst, '\\', c)
			}
		}
		dst = append(dst, '.')
		off += 1 + l
	}
	if len(dst) == start {
		dst = append(dst, '.')
	}
	return dst
}

// NameText is AppendNameText as a string.
func NameText(wire []byte) string {
	var buf [4 * MaxNameLen]byte
	return string(AppendNameText(buf[:0], wire))
}

// AppendPlainNameText is AppendNameText for a name none of whose bytes
// needs an escape, the common case: it reports false, having appended
// only part of the name, when one does.
func AppendPlainNameText(dst, wire []byte) ([]byte, bool) {
	dst, simple, _ := AppendPlainNameTextUpper(dst, wire)
	return dst, simple
}

// AppendPlainNameTextUpper is AppendPlainNameText that also reports
// whether the name has an ASCII upper-case letter, from the same pass
// over its bytes: a caller that wants the name in lower case (a cache
// key) then knows whether it already is, without a second pass.
func AppendPlainNameTextUpper(dst, wire []byte) (out []byte, simple, upper bool) {
	start := len(dst)
	var seen uint8
	for off := 0; off < len(wire); {
		l := int(wire[off])
		if l == 0 || off+1+l > len(wire) {
			break
		}
		for _, c := range wire[off+1 : off+1+l] {
			seen |= textClass[c]
		}
		if seen&classEscape != 0 {
			return dst, false, false
		}
		dst = append(append(dst, wire[off+1:off+1+l]...), '.')
		off += 1 + l
	}
	if len(dst) == start {
		dst = append(dst, '.')
	}
	return dst, true, seen&classUpper != 0
}

// textClass classes the bytes of a label for AppendPlainNameTextUpper.
const (
	classEscape = 1 << iota // needsEscape
	classUpper              // 'A' to 'Z'
)

var textClass = func() (t [256]uint8) {
	for c := range t {
		if needsEscape[c] {
			t[c] |= classEscape
		}
		if 'A' <= c && c <= 'Z' {
			t[c] |= classUpper
		}
	}
	return t
}()

// needsEscape marks the bytes a label's presentation form escapes: those
// special in master files with a backslash, the rest outside printable
// ASCII as \DDD (as miekg/dns writes them).
var needsEscape = func() (t [256]bool) {
	for c := range t {
		t[c] = c < ' ' || c > '~'
	}
	for _, c := range []byte{'.', ' ', '\'', '@', ';', '(', ')', '"', '\\'} {
		t[c] = true
	}
	return t
}()

// PackName appends the wire form of the fully qualified presentation name
// s (escapes \X and \DDD read) to dst, uncompressed.
func PackName(dst []byte, s string) ([]byte, error) {
	if !IsFqdn(s) {
		return dst, ErrFqdn
	}
	if s == "." {
		return append(dst, 0), nil
	}
	start := len(dst)
	lenAt := len(dst)
	dst = append(dst, 0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			if i+3 < len(s) && isDDD(s[i+1:]) {
				c = byte(int(s[i+1]-'0')*100 + int(s[i+2]-'0')*10 + int(s[i+3]-'0'))
				i += 3
			} else {
				i++
				c = s[i] // IsFqdn: a name does not end in a lone backslash
			}
			dst = append(dst, c)
		case '.':
			l := len(dst) - lenAt - 1
			if l == 0 {
				return dst[:start], ErrName // an empty label: leading or doubled dot
			}
			if l > MaxLabelLen {
				return dst[:start], ErrName
			}
			dst[lenAt] = byte(l)
			lenAt = len(dst)
			dst = append(dst, 0)
		default:
			dst = append(dst, c)
		}
		if len(dst)-start > MaxNameLen {
			return dst[:start], ErrLongName
		}
	}
	return dst, nil
}

func isDDD(s string) bool {
	return len(s) >= 3 && isDigit(s[0]) && isDigit(s[1]) && isDigit(s[2])
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// EqualNames reports whether two uncompressed wire names are the same
// name: equal but for ASCII case.
func EqualNames(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x != y && lower(x) != lower(y) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// IsFqdn reports whether the presentation name s ends in an unescaped dot.
func IsFqdn(s string) bool {
	if s == "" || s[len(s)-1] != '.' {
		return false
	}
	n := 0 // backslashes before the final dot
	for i := len(s) - 2; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n%2 == 0
}

// Fqdn is s fully qualified.
func Fqdn(s string) string {
	if IsFqdn(s) {
		return s
	}
	return s + "."
}

// IsDomainName reports whether s (fully qualified or not) is a name that
// fits the wire form, and its labels, with miekg/dns's rule: no empty
// label but the root, labels of at most 63 octets, 255 in all.
func IsDomainName(s string) (labels int, ok bool) {
	if s == "" {
		return 0, false
	}
	var buf [MaxNameLen + 1]byte
	wire, err := PackName(buf[:0], Fqdn(s))
	if err != nil {
		return 0, false
	}
	if len(wire) == 1 {
		return 1, true // miekg/dns counts the root's dot
	}
	return CountLabelsWire(wire), true
}

// CountLabel is the number of labels of the presentation name s; 0 for
// the root.
func CountLabel(s string) int {
	if s == "" || s == "." {
		return 0
	}
	n := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '.':
			n++
		}
	}
	if !IsFqdn(s) {
		n++
	}
	return n
}

// CountLabelsWire is the number of labels of an uncompressed wire name.
func CountLabelsWire(wire []byte) int {
	n := 0
	for off := 0; off < len(wire) && wire[off] != 0; off += 1 + int(wire[off]) {
		n++
	}
	return n
}

// ReverseAddr is the in-addr.arpa. or ip6.arpa. name of a.
func ReverseAddr(a netip.Addr) string {
	a = a.Unmap()
	var b strings.Builder
	if a.Is4() {
		v := a.As4()
		for i := 3; i >= 0; i-- {
			b.WriteString(strconv.Itoa(int(v[i])))
			b.WriteByte('.')
		}
		b.WriteString("in-addr.arpa.")
		return b.String()
	}
	const hex = "0123456789abcdef"
	v := a.As16()
	for i := 15; i >= 0; i-- {
		b.WriteByte(hex[v[i]&0xF])
		b.WriteByte('.')
		b.WriteByte(hex[v[i]>>4])
		b.WriteByte('.')
	}
	b.WriteString("ip6.arpa.")
	return b.String()
}
