package engine

import (
	"net"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/dnswire"
)

// The hand-written upstream query is what miekg/dns reads back: the
// question, RD and CD, EDNS0 at 1232 with DO, and ECS only when asked.
func TestAppendQueryParsesBack(t *testing.T) {
	client := new(dns.Msg)
	client.SetQuestion("Www.Example.ORG.", dns.TypeAAAA)
	client.CheckingDisabled = true
	client.SetEdns0(4096, true)
	ecs := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(192, 0, 2, 0)}
	opt := client.IsEdns0()
	opt.Option = append(opt.Option, ecs)
	raw, err := client.Pack()
	if err != nil {
		t.Fatal(err)
	}
	cq, ok := parseQuery(raw)
	if !ok || !cq.ecs || !cq.do || !cq.cd || !cq.rd || cq.name != "Www.Example.ORG." {
		t.Fatalf("parseQuery: %+v %v", cq, ok)
	}

	for _, forward := range []bool{false, true} {
		wire, err := appendQuery(nil, cq, cq.name, forward)
		if err != nil {
			t.Fatal(err)
		}
		var m dns.Msg
		if err := m.Unpack(wire[2:]); err != nil {
			t.Fatalf("forward=%v: unpack: %v", forward, err)
		}
		if m.Question[0] != client.Question[0] || !m.RecursionDesired || !m.CheckingDisabled || m.Response || m.Opcode != dns.OpcodeQuery {
			t.Fatalf("forward=%v: header/question %+v", forward, m)
		}
		o := m.IsEdns0()
		if o == nil || o.UDPSize() != 1232 || !o.Do() || o.Version() != 0 {
			t.Fatalf("forward=%v: OPT %v", forward, o)
		}
		if got := len(o.Option); (got == 1) != forward {
			t.Fatalf("forward=%v: %d options", forward, got)
		}
	}
	long := make([]byte, 0, 300)
	for len(long) < 260 {
		long = append(long, "abcdefghi."...)
	}
	if _, err := appendQuery(nil, cq, string(long), false); err == nil {
		t.Fatal("a name over 255 octets packed")
	}
}

// TestAppendQueryCopiesTheClientsName: asking the name as the client wrote
// it copies its wire form from the query; the bytes are those packing the
// presentation name writes, escapes and case included.
func TestAppendQueryCopiesTheClientsName(t *testing.T) {
	for _, name := range []string{".", "Www.Example.ORG.", `a\.b.example.`, `x\032y.example.`, `q\"uote.example.`, "xn--bcher-kva.example."} {
		q := new(dns.Msg)
		q.SetQuestion(name, dns.TypeA)
		raw, err := q.Pack()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cq, ok := parseQuery(raw)
		if !ok {
			t.Fatalf("%s: parseQuery failed", name)
		}
		copied, err := appendQuery(nil, cq, cq.name, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		packedFrom := *cq
		packedFrom.qname = nil // as a detached question, which keeps no query bytes
		packed, err := appendQuery(nil, &packedFrom, cq.name, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(copied) != string(packed) {
			t.Errorf("%s: copied %x, packed %x", name, copied, packed)
		}
	}
}

// TestNameStringAsMiekg: the presentation form of a question name is
// miekg/dns's, escapes included, for every byte in a label; it is said
// to be lower case exactly when it is and has no escape (an escaped
// name is not known to be).
func TestNameStringAsMiekg(t *testing.T) {
	for c := range 256 {
		wire := []byte{3, 'a', byte(c), 'b', 4, 't', 'e', 's', 't', 0}
		got, lower := nameString(wire)
		want, _, err := dns.UnpackDomainName(wire, 0)
		if err != nil || got != want {
			t.Errorf("byte %#x: %q, miekg/dns %q (%v)", c, got, want, err)
		}
		if wantLower := got == strings.ToLower(got) && !strings.Contains(got, `\`); lower != wantLower {
			t.Errorf("byte %#x: %q lower %v, want %v", c, got, lower, wantLower)
		}
	}
}

// TestKeyForLowersOnlyWhenNeeded: a question's cache key is its name in
// lower case whether the name was read as lower case or not, and a
// search candidate's is the candidate's in lower case.
func TestKeyForLowersOnlyWhenNeeded(t *testing.T) {
	for _, name := range []string{"www.example.test.", "WwW.ExAmple.TEST.", `a\.b.example.`, `A\032B.example.`} {
		wire, err := dnswire.PackName(nil, name)
		if err != nil {
			t.Fatal(err)
		}
		q := append([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0}, wire...)
		q = append(q, 0, 1, 0, 1)
		for _, buf := range []*[maxNameText]byte{nil, new([maxNameText]byte)} {
			var cq clientQuery
			if !cq.parseInto(q, buf) {
				t.Fatalf("%s: does not parse", name)
			}
			if k := keyFor(&cq, cq.name); k.name != strings.ToLower(cq.name) {
				t.Errorf("%s: key %q, want %q", name, k.name, strings.ToLower(cq.name))
			}
			if k := keyFor(&cq, "Other.Example."); k.name != "other.example." {
				t.Errorf("%s: candidate key %q", name, k.name)
			}
		}
	}
}

// TestParseIntoSetsEveryField: parseInto sets each clientQuery field one
// by one, not with a literal; a cq that held another query (every field
// set, through reflection, so a field added later is covered) reads a
// query exactly as a zero one does, with an OPT record and without.
func TestParseIntoSetsEveryField(t *testing.T) {
	plain := new(dns.Msg)
	plain.SetQuestion("Plain.Example.", dns.TypeAAAA)
	withOpt := new(dns.Msg)
	withOpt.SetQuestion("opt.example.", dns.TypeA)
	withOpt.SetEdns0(1232, true)
	withOpt.IsEdns0().Option = append(withOpt.IsEdns0().Option, &dns.EDNS0_PADDING{Padding: make([]byte, 8)})
	for _, m := range []*dns.Msg{plain, withOpt} {
		raw, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		for _, buf := range []*[maxNameText]byte{nil, new([maxNameText]byte)} {
			var want clientQuery
			if !want.parseInto(raw, buf) {
				t.Fatalf("%s: does not parse", m.Question[0].Name)
			}
			var got clientQuery
			v := reflect.ValueOf(&got).Elem()
			for i := range v.NumField() {
				f := v.Field(i)
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
				switch f.Kind() {
				case reflect.Bool:
					f.SetBool(true)
				case reflect.Uint16:
					f.SetUint(0xBEEF)
				case reflect.String:
					f.SetString("stale.example.")
				case reflect.Slice:
					f.SetBytes([]byte{1, 2, 3})
				default:
					t.Fatalf("field %s of kind %s: teach this test to fill it", v.Type().Field(i).Name, f.Kind())
				}
			}
			if !got.parseInto(raw, buf) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s (buffer %v): over a used clientQuery %+v, want %+v", m.Question[0].Name, buf != nil, got, want)
			}
		}
	}
}
