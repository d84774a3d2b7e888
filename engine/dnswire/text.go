package dnswire

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"time"
)

// The presentation format (RFC 1035 §5.1) of what a message holds, as
// github.com/miekg/dns prints it: the JSON form of DoH answers shows it, and
// clients that compared it with other resolvers' must see the same text.

var errTextRdata = errors.New("dnswire: malformed record data")

// appendStringByte writes a byte of a character-string (RFC 1035 §5.1):
// within quotes only `"` and `\` need the backslash.
func appendStringByte(dst []byte, b byte) []byte {
	switch {
	case b == '"' || b == '\\':
		return append(dst, '\\', b)
	case b < ' ' || b > '~':
		return appendDDD(dst, b)
	}
	return append(dst, b)
}

func appendDDD(dst []byte, b byte) []byte {
	return append(dst, '\\', '0'+b/100, '0'+b/10%10, '0'+b%10)
}

// rdataForm gives the fields of a type's record data in wire order, one
// letter each (see appendField), or "" for a type shown in RFC 3597's
// generic form. The types are those miekg/dns prints as fields, less a
// few rare ones with forms of their own (CERT, APL, IPSECKEY,
// AMTRELAY, HIP) and the pseudo-records.
func rdataForm(t uint16) string {
	switch t {
	case TypeA:
		return "4"
	case TypeAAAA:
		return "6"
	case TypeNS, TypeCNAME, TypePTR, TypeDNAME, TypeMB, TypeMD, TypeMF, TypeMG, TypeMR, TypeNSAPPTR:
		return "n"
	case TypeMINFO, TypeRP, TypeTALINK:
		return "nn"
	case TypeMX, TypeAFSDB, TypeRT, TypeKX, TypeLP:
		return "Hn"
	case TypePX:
		return "Hnn"
	case TypeSOA:
		return "nnLLLLL"
	case TypeTXT, TypeSPF, TypeAVC, TypeNINFO, TypeRESINFO:
		return "T"
	case TypeHINFO, TypeISDN:
		return "ss"
	case TypeUINFO:
		return "s"
	case TypeX25:
		return "c"
	case TypeGPOS:
		return "ccc"
	case TypeSRV:
		return "HHHn"
	case TypeNAPTR:
		return "HHsssn"
	case TypeCAA:
		return "Bco"
	case TypeURI:
		return "HHo"
	case TypeDS, TypeCDS, TypeDLV, TypeTA:
		return "HBBx"
	case TypeSSHFP:
		return "BBx"
	case TypeDNSKEY, TypeCDNSKEY, TypeKEY, TypeRKEY:
		return "HBBb"
	case TypeRRSIG, TypeSIG:
		return "yBBLttHnb"
	case TypeNSEC, TypeNXT:
		return "nm"
	case TypeNSEC3:
		return "BBHSNm"
	case TypeNSEC3PARAM:
		return "BBHS"
	case TypeCSYNC:
		return "LHm"
	case TypeTLSA:
		return "BBBh"
	case TypeSMIMEA:
		return "BBBM"
	case TypeZONEMD:
		return "LBBh"
	case TypeDHCID, TypeOPENPGPKEY:
		return "b"
	case TypeEID, TypeNIMLOC:
		return "x"
	case TypeUID, TypeGID:
		return "L"
	case TypeL32:
		return "H4"
	case TypeL64:
		return "HI"
	case TypeNID:
		return "Hi"
	case TypeEUI48:
		return "e"
	case TypeEUI64:
		return "E"
	case TypeSVCB, TypeHTTPS:
		return "Hnv"
	case TypeLOC:
		return "l"
	}
	return ""
}

// AppendRdataText appends the presentation form of the record data of
// type rrtype at msg[start:end] (msg is the whole message, which its names
// may point into): what miekg/dns's RR.String() gives after the owner,
// TTL, class and type, e.g. "10 mail.example.org." for MX. A type without
// a form here reads as RFC 3597 §5 "\# 4 c0000201". Empty record data
// (an update's deletion) of a type with a form reads as "". Data that
// does not parse as its type (short, trailing bytes, a bad name, an
// out-of-order type bitmap or SvcParam) is an error, and dst comes back
// as it was: the caller may show the generic form instead
// (AppendGenericRdataText).
func AppendRdataText(dst, msg []byte, rrtype uint16, start, end int) ([]byte, error) {
	if start < 0 || end < start || end > len(msg) {
		return dst, errTextRdata
	}
	form := rdataForm(rrtype)
	if form == "" {
		return AppendGenericRdataText(dst, msg[start:end]), nil
	}
	if start == end {
		return dst, nil
	}
	n := len(dst)
	msg = msg[:end] // names inside stay inside, as in miekg/dns
	off := start
	var err error
	for i := 0; i < len(form); i++ {
		if i > 0 && form[i] != 'm' && form[i] != 'v' { // those two space their items
			dst = append(dst, ' ')
		}
		if dst, off, err = appendField(dst, msg, off, form[i]); err != nil {
			return dst[:n], err
		}
	}
	if off != end {
		return dst[:n], errTextRdata
	}
	return dst, nil
}

// AppendGenericRdataText appends RFC 3597's form of record data: "\#",
// its length, and its bytes in hex ("\# 0" when there are none).
func AppendGenericRdataText(dst, rdata []byte) []byte {
	dst = append(dst, `\# `...)
	dst = strconv.AppendInt(dst, int64(len(rdata)), 10)
	if len(rdata) > 0 {
		dst = append(dst, ' ')
		dst = appendHex(dst, rdata, lowerHex)
	}
	return dst
}

const (
	lowerHex = "0123456789abcdef"
	upperHex = "0123456789ABCDEF"
)

func appendHex(dst, b []byte, digits string) []byte {
	for _, c := range b {
		dst = append(dst, digits[c>>4], digits[c&0xF])
	}
	return dst
}

var base32HexNoPad = base32.HexEncoding.WithPadding(base32.NoPadding)

// appendField appends one field of record data in msg[off:] (msg ends
// where the record data does) and gives the offset after it.
//
//	B, H, L  8-, 16-, 32-bit number in decimal
//	4, 6     IPv4, IPv6 address
//	n        name
//	s        character-string in quotes; c the same without them
//	T        character-strings to the end, each in quotes
//	o        octets to the end in quotes (CAA value, URI target)
//	x, h     octets to the end in hex, upper / lower case
//	M        as h, a space every 1 024 digits (SMIMEA)
//	b        octets to the end in base64
//	S        a salt: length octet, then hex ("-" when empty)
//	N        a hashed name: length octet, then base32hex
//	m        type bitmap to the end, " TYPE" for each type (RFC 4034 §4.1.2)
//	t        32-bit time as YYYYMMDDHHmmSS (RFC 4034 §3.2)
//	y        16-bit type as its mnemonic
//	e, E     EUI-48, EUI-64 (RFC 7043)
//	i, I     64-bit NID / L64 locator as four groups of hex (RFC 6742)
//	v        SvcParams to the end (RFC 9460 §2.1)
//	l        a location (RFC 1876 §3)
func appendField(dst, msg []byte, off int, f byte) ([]byte, int, error) {
	rest := msg[off:]
	need := 0
	switch f {
	case 'B', 's', 'c', 'S', 'N':
		need = 1
	case 'H', 'y':
		need = 2
	case 'L', 't', '4':
		need = 4
	case 'e':
		need = 6
	case 'E', 'i', 'I':
		need = 8
	case 'l':
		need = 16
	case '6':
		need = 16
	}
	if len(rest) < need {
		return dst, off, errTextRdata
	}
	switch f {
	case 'B':
		return strconv.AppendUint(dst, uint64(rest[0]), 10), off + 1, nil
	case 'H':
		return strconv.AppendUint(dst, uint64(binary.BigEndian.Uint16(rest)), 10), off + 2, nil
	case 'L':
		return strconv.AppendUint(dst, uint64(binary.BigEndian.Uint32(rest)), 10), off + 4, nil
	case 'y':
		return append(dst, TypeString(binary.BigEndian.Uint16(rest))...), off + 2, nil
	case 't':
		t := time.Unix(int64(binary.BigEndian.Uint32(rest)), 0).UTC()
		return t.AppendFormat(dst, "20060102150405"), off + 4, nil
	case '4':
		return netip.AddrFrom4([4]byte(rest)).AppendTo(dst), off + 4, nil
	case '6':
		// A mapped IPv4 address reads "::ffff:192.0.2.1", as netip has it.
		return netip.AddrFrom16([16]byte(rest)).AppendTo(dst), off + 16, nil
	case 'n':
		var buf [MaxNameLen]byte
		wire, next, err := AppendNameWire(buf[:0], msg, off)
		if err != nil {
			return dst, off, err
		}
		return AppendNameText(dst, wire), next, nil
	case 's', 'c':
		l := int(rest[0])
		if 1+l > len(rest) {
			return dst, off, errTextRdata
		}
		if f == 's' {
			dst = append(dst, '"')
		}
		for _, b := range rest[1 : 1+l] {
			dst = appendStringByte(dst, b)
		}
		if f == 's' {
			dst = append(dst, '"')
		}
		return dst, off + 1 + l, nil
	case 'T':
		for i := 0; len(rest) > 0; i++ {
			if i > 0 {
				dst = append(dst, ' ')
			}
			var err error
			if dst, off, err = appendField(dst, msg, off, 's'); err != nil {
				return dst, off, err
			}
			rest = msg[off:]
		}
		return dst, off, nil
	case 'o':
		return appendOctetText(dst, rest), len(msg), nil
	case 'x':
		return appendHex(dst, rest, upperHex), len(msg), nil
	case 'h':
		return appendHex(dst, rest, lowerHex), len(msg), nil
	case 'M':
		// miekg/dns splits the hex into 1 024-digit pieces, and a length
		// that is a multiple of that ends with an empty piece: a space.
		for i := 0; i < len(rest); i += 512 {
			dst = appendHex(dst, rest[i:min(i+512, len(rest))], lowerHex)
			if i+512 <= len(rest) {
				dst = append(dst, ' ')
			}
		}
		return dst, len(msg), nil
	case 'b':
		return base64.StdEncoding.AppendEncode(dst, rest), len(msg), nil
	case 'S', 'N':
		l := int(rest[0])
		if 1+l > len(rest) {
			return dst, off, errTextRdata
		}
		switch {
		case f == 'N':
			dst = base32HexNoPad.AppendEncode(dst, rest[1:1+l])
		case l == 0:
			dst = append(dst, '-')
		default:
			dst = appendHex(dst, rest[1:1+l], upperHex)
		}
		return dst, off + 1 + l, nil
	case 'm':
		return appendTypeBitmap(dst, rest, off)
	case 'e', 'E':
		for i, b := range rest[:need] {
			if i > 0 {
				dst = append(dst, '-')
			}
			dst = append(dst, lowerHex[b>>4], lowerHex[b&0xF])
		}
		return dst, off + need, nil
	case 'i', 'I':
		digits := lowerHex
		if f == 'I' {
			digits = upperHex
		}
		for i := 0; i < 8; i += 2 {
			if i > 0 {
				dst = append(dst, ':')
			}
			dst = appendHex(dst, rest[i:i+2], digits)
		}
		return dst, off + 8, nil
	case 'v':
		return appendSvcParams(dst, rest, off)
	case 'l':
		return appendLOC(dst, rest), off + 16, nil
	}
	return dst, off, errTextRdata
}

// appendOctetText writes octets to the end of the record data in quotes,
// as miekg/dns does: a backslash in the data is read as the start of an
// escape (`\065` gives "A", `\.` stays), then the byte is written as in a
// character-string.
func appendOctetText(dst, s []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			dst = appendStringByte(dst, s[i])
			i++
			continue
		}
		switch left := len(s) - i; {
		case left == 1: // a dangling backslash is dropped
			i++
		case s[i+1] == '.':
			dst = append(dst, '\\', '.')
			i += 2
		case left >= 4 && isDigit(s[i+1]) && isDigit(s[i+2]) && isDigit(s[i+3]):
			// byte arithmetic, wrapping past 255 as miekg/dns's does
			b := (s[i+1]-'0')*100 + (s[i+2]-'0')*10 + (s[i+3] - '0')
			dst = appendStringByte(dst, b)
			i += 4
		default:
			dst = appendStringByte(dst, s[i+1])
			i += 2
		}
	}
	return append(dst, '"')
}

// appendTypeBitmap writes the types of an NSEC-style bitmap, each after a
// space. Windows must rise, and hold 1 to 32 octets (RFC 4034 §4.1.2).
func appendTypeBitmap(dst, b []byte, off int) ([]byte, int, error) {
	last := -1
	for len(b) > 0 {
		if len(b) < 2 {
			return dst, off, errTextRdata
		}
		window, l := int(b[0]), int(b[1])
		if window <= last || l == 0 || l > 32 || 2+l > len(b) {
			return dst, off, errTextRdata
		}
		last = window
		for j, octet := range b[2 : 2+l] {
			for bit := 0; bit < 8; bit++ {
				if octet&(0x80>>bit) != 0 {
					dst = append(dst, ' ')
					dst = append(dst, TypeString(uint16(window<<8|j*8+bit))...)
				}
			}
		}
		b = b[2+l:]
		off += 2 + l
	}
	return dst, off, nil
}

// SvcParamKeys (RFC 9460 §14.3.2, RFC 9461 §5, RFC 9540 §8).
const (
	SvcParamMandatory     uint16 = 0
	SvcParamALPN          uint16 = 1
	SvcParamNoDefaultALPN uint16 = 2
	SvcParamPort          uint16 = 3
	SvcParamIPv4Hint      uint16 = 4
	SvcParamECH           uint16 = 5
	SvcParamIPv6Hint      uint16 = 6
	SvcParamDoHPath       uint16 = 7
	SvcParamOHTTP         uint16 = 8
	svcParamInvalid       uint16 = 65535
)

var svcParamNames = [...]string{"mandatory", "alpn", "no-default-alpn", "port", "ipv4hint", "ech", "ipv6hint", "dohpath", "ohttp"}

// appendSvcParamKey writes a key's name, "keyNNNNN" for one without
// (RFC 9460 §2.1) and nothing for the invalid key 65535.
func appendSvcParamKey(dst []byte, k uint16) []byte {
	if int(k) < len(svcParamNames) {
		return append(dst, svcParamNames[k]...)
	}
	if k == svcParamInvalid {
		return dst
	}
	return strconv.AppendUint(append(dst, "key"...), uint64(k), 10)
}

// appendSvcParams writes SvcParams as ` key="value"` each, in wire order,
// which must be strictly rising; each value must be well formed for its
// key.
func appendSvcParams(dst, b []byte, off int) ([]byte, int, error) {
	prev := -1
	for len(b) > 0 {
		if len(b) < 4 {
			return dst, off, errTextRdata
		}
		key, l := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if 4+l > len(b) || int(key) <= prev || key == svcParamInvalid {
			return dst, off, errTextRdata
		}
		prev = int(key)
		v := b[4 : 4+l]
		dst = append(dst, ' ')
		dst = appendSvcParamKey(dst, key)
		dst = append(dst, '=', '"')
		var ok bool
		if dst, ok = appendSvcParamValue(dst, key, v); !ok {
			return dst, off, errTextRdata
		}
		dst = append(dst, '"')
		b = b[4+l:]
		off += 4 + l
	}
	return dst, off, nil
}

func appendSvcParamValue(dst []byte, key uint16, v []byte) ([]byte, bool) {
	switch key {
	case SvcParamMandatory:
		if len(v)%2 != 0 {
			return dst, false
		}
		for i := 0; i < len(v); i += 2 {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendSvcParamKey(dst, binary.BigEndian.Uint16(v[i:]))
		}
	case SvcParamALPN:
		for i := 0; i < len(v); {
			l := int(v[i])
			if i+1+l > len(v) {
				return dst, false
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			for _, c := range v[i+1 : i+1+l] {
				switch {
				case c < ' ' || c > '~':
					dst = appendDDD(dst, c)
				case c == '"' || c == ';' || c == ' ':
					dst = append(dst, '\\', c)
				case c == ',': // escaped twice: for the list, then for the text
					dst = append(dst, `\\\044`...)
				case c == '\\':
					dst = append(dst, `\\\092`...)
				default:
					dst = append(dst, c)
				}
			}
			i += 1 + l
		}
	case SvcParamNoDefaultALPN, SvcParamOHTTP:
		if len(v) != 0 {
			return dst, false
		}
	case SvcParamPort:
		if len(v) != 2 {
			return dst, false
		}
		dst = strconv.AppendUint(dst, uint64(binary.BigEndian.Uint16(v)), 10)
	case SvcParamIPv4Hint, SvcParamIPv6Hint:
		size := 4
		if key == SvcParamIPv6Hint {
			size = 16
		}
		if len(v) == 0 || len(v)%size != 0 {
			return dst, false
		}
		for i := 0; i < len(v); i += size {
			if i > 0 {
				dst = append(dst, ',')
			}
			if size == 4 {
				dst = netip.AddrFrom4([4]byte(v[i:])).AppendTo(dst)
				continue
			}
			a := netip.AddrFrom16([16]byte(v[i:]))
			if a.Is4In6() {
				return dst, false // an IPv4 address belongs in ipv4hint
			}
			dst = a.AppendTo(dst)
		}
	case SvcParamECH:
		dst = base64.StdEncoding.AppendEncode(dst, v)
	default: // dohpath and keys without a form of their own
		for _, c := range v {
			switch {
			case c < ' ' || c > '~':
				dst = appendDDD(dst, c)
			case c == '"' || c == ';' || c == ' ' || c == '\\':
				dst = append(dst, '\\', c)
			default:
				dst = append(dst, c)
			}
		}
	}
	return dst, true
}

// TypeFromString is the type whose mnemonic is s, exactly as TypeString
// writes it ("AAAA", "NSAP-PTR"); false for any other text.
func TypeFromString(s string) (uint16, bool) {
	for t, name := range typeNames {
		if name == s && name != "" {
			return uint16(t), true
		}
	}
	for t, name := range bigTypeNames {
		if name == s {
			return t, true
		}
	}
	return 0, false
}

// appendLOC writes a LOC record's 16 octets (RFC 1876 §3) as miekg/dns
// does: "52 22 23.000 N 4 53 32.000 E -2m 1m 10000m 10m", the degrees of
// at least two digits.
func appendLOC(dst, b []byte) []byte {
	const equator, degree, minute = 1 << 31, 3600000, 60000 // thousandths of a second of arc
	for i, dir := range [2]string{"NS", "EW"} {
		v := binary.BigEndian.Uint32(b[4+4*i:])
		d := dir[0]
		if v > equator {
			v -= equator
		} else {
			d, v = dir[1], equator-v
		}
		dst = appendTwoDigits(dst, v/degree)
		dst = append(dst, ' ')
		dst = appendTwoDigits(dst, v%degree/minute)
		dst = append(dst, ' ')
		dst = strconv.AppendFloat(dst, float64(v%minute)/1000, 'f', 3, 64)
		dst = append(dst, ' ', d, ' ')
	}
	alt := binary.BigEndian.Uint32(b[12:])
	prec := 0
	if alt%100 != 0 {
		prec = 2
	}
	dst = strconv.AppendFloat(dst, float64(alt)/100-100000, 'f', prec, 64)
	dst = append(dst, 'm')
	for _, x := range b[1:4] { // size, horizontal and vertical precision
		dst = append(dst, ' ')
		m, e := x>>4, x&0xF
		switch {
		case e < 2:
			if e == 1 {
				m *= 10
			}
			dst = append(dst, '0', '.')
			dst = appendTwoDigits(dst, uint32(m))
		default:
			dst = strconv.AppendUint(dst, uint64(m), 10)
			for ; e > 2; e-- {
				dst = append(dst, '0')
			}
		}
		dst = append(dst, 'm')
	}
	return dst
}

func appendTwoDigits(dst []byte, v uint32) []byte {
	if v < 10 {
		dst = append(dst, '0')
	}
	return strconv.AppendUint(dst, uint64(v), 10)
}
