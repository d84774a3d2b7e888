package odoh

import (
	"bytes"
	"testing"
)

// FuzzOpen feeds the target's parser and decryption any bytes: never a
// panic, and whatever opens holds a DNS message that re-encodes to the
// plaintext it came in.
func FuzzOpen(f *testing.F) {
	r, _ := NewKeyring(bytes.Repeat([]byte{7}, SeedSize), 0, nil)
	cs, _ := ParseConfigs(r.Configs())
	good, _, _ := SealQuery(cs[0], testQuery, 8)
	f.Add(good)
	f.Add([]byte{1, 0, 0, 0, 1, 0})
	f.Add(r.Configs())
	f.Fuzz(func(t *testing.T, b []byte) {
		if o, err := r.Open(b); err == nil {
			if len(o.Query) == 0 || !bytes.Equal(AppendPlaintext(nil, o.Query, len(o.plain)-4-len(o.Query)), o.plain) {
				t.Fatalf("opened %x from %x", o.Query, o.plain)
			}
		}
		if m, err := ParseMessage(b); err == nil {
			if !bytes.Equal(AppendMessage(nil, m), b) {
				t.Fatalf("message %x does not re-encode", b)
			}
		}
		if cs, err := ParseConfigs(b); err == nil && len(cs) == 0 {
			t.Fatal("ParseConfigs took a list with no configuration")
		}
		if dns, err := ParsePlaintext(b); err == nil && len(dns) == 0 {
			t.Fatal("ParsePlaintext took an empty DNS message")
		}
	})
}
