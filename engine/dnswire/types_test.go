package dnswire

import (
	"strconv"
	"testing"

	"github.com/miekg/dns"
)

// The mnemonics are those of presentation format, which miekg/dns also
// prints: the names must agree wherever either knows the number.
func TestMnemonicsAgreeWithMiekg(t *testing.T) {
	for n := 0; n <= 0xFFFF; n++ {
		want, ok := dns.TypeToString[uint16(n)]
		if !ok {
			want = "TYPE" + strconv.Itoa(n)
		}
		if got := TypeString(uint16(n)); got != want {
			t.Errorf("TypeString(%d) = %q, want %q", n, got, want)
		}
	}
	for n := 0; n < 256; n++ {
		if want, ok := dns.ClassToString[uint16(n)]; ok && ClassString(uint16(n)) != want {
			t.Errorf("ClassString(%d) = %q, want %q", n, ClassString(uint16(n)), want)
		}
	}
	for n := 0; n < 4096; n++ {
		want, ok := dns.RcodeToString[n]
		if !ok {
			want = "RCODE" + strconv.Itoa(n)
		}
		if got := RcodeString(n); got != want {
			t.Errorf("RcodeString(%d) = %q, want %q", n, got, want)
		}
	}
	for n := 0; n < 16; n++ {
		if want, ok := dns.OpcodeToString[n]; ok && OpcodeString(n) != want {
			t.Errorf("OpcodeString(%d) = %q, want %q", n, OpcodeString(n), want)
		}
	}
	for n := 0; n < 64; n++ {
		if got, want := ExtendedErrorText(uint16(n)), dns.ExtendedErrorCodeToString[uint16(n)]; got != want {
			t.Errorf("ExtendedErrorText(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestConstantsAgreeWithMiekg(t *testing.T) {
	pairs := []struct{ ours, theirs int }{
		{int(TypeA), int(dns.TypeA)}, {int(TypeHTTPS), int(dns.TypeHTTPS)}, {int(TypeOPT), int(dns.TypeOPT)},
		{RcodeBadVers, dns.RcodeBadVers}, {RcodeBadCookie, dns.RcodeBadCookie},
		{int(EDNS0EDE), int(dns.EDNS0EDE)}, {int(EDNS0PADDING), int(dns.EDNS0PADDING)},
		{ExtendedErrorCodeNoReachableAuthority, int(dns.ExtendedErrorCodeNoReachableAuthority)},
		{ExtendedErrorCodeStaleAnswer, int(dns.ExtendedErrorCodeStaleAnswer)},
		{MinMsgSize, dns.MinMsgSize}, {DefaultMsgSize, dns.DefaultMsgSize}, {MaxMsgSize, dns.MaxMsgSize},
	}
	for i, p := range pairs {
		if p.ours != p.theirs {
			t.Errorf("pair %d: %d, miekg/dns %d", i, p.ours, p.theirs)
		}
	}
}
