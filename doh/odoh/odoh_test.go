package odoh

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var testQuery = []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1}

func testKeyring(t *testing.T, rotate time.Duration, now func() time.Time) *Keyring {
	t.Helper()
	r, err := NewKeyring(bytes.Repeat([]byte{7}, SeedSize), rotate, now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func firstConfig(t *testing.T, r *Keyring) Config {
	t.Helper()
	cs, err := ParseConfigs(r.Configs())
	if err != nil {
		t.Fatal(err)
	}
	return cs[0]
}

// TestRoundTrip: a client's query opens at the target to the same DNS
// message, and the target's sealed answer opens at the client.
func TestRoundTrip(t *testing.T) {
	r := testKeyring(t, 0, nil)
	msg, pq, err := SealQuery(firstConfig(t, r), testQuery, 17)
	if err != nil {
		t.Fatal(err)
	}
	o, err := r.Open(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(o.Query, testQuery) {
		t.Fatalf("query %x, want %x", o.Query, testQuery)
	}
	answer := append(bytes.Clone(testQuery), 0xAA)
	resp, err := o.Seal(nil, answer, PaddingFor(len(answer)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pq.OpenResponse(resp)
	if err != nil || !bytes.Equal(got, answer) {
		t.Fatalf("OpenResponse = %x, %v", got, err)
	}
	// Two answers to one query carry different nonces.
	resp2, _ := o.Seal(nil, answer, 0)
	if bytes.Equal(resp[3:19], resp2[3:19]) {
		t.Fatal("two responses share a response nonce")
	}
}

// TestOpenRefuses states what a target refuses, and with which error
// (each has its HTTP status): a malformed message, a response where a
// query belongs, a key_id it does not hold, a bad tag, padding that is
// not all zeros.
func TestOpenRefuses(t *testing.T) {
	r := testKeyring(t, 0, nil)
	c := firstConfig(t, r)
	good, _, err := SealQuery(c, testQuery, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewKeyring(bytes.Repeat([]byte{8}, SeedSize), 0, nil)
	foreign, _, _ := SealQuery(firstConfig(t, other), testQuery, 0)
	tampered := bytes.Clone(good)
	tampered[len(tampered)-1] ^= 1
	wrongType := bytes.Clone(good)
	wrongType[0] = MessageResponse
	badPad, _, _ := sealPlaintext(c, append(AppendPlaintext(nil, testQuery, 0)[:2+len(testQuery)], 0, 2, 0, 1))
	emptyDNS, _, _ := sealPlaintext(c, []byte{0, 0, 0, 0})
	for _, tc := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"truncated", good[:len(good)-5], ErrMalformed},
		{"trailing byte", append(bytes.Clone(good), 0), ErrMalformed},
		{"response type", wrongType, ErrMessageType},
		{"unknown key", foreign, ErrUnknownKey},
		{"bad tag", tampered, ErrDecrypt},
		{"nonzero padding", badPad, ErrPadding},
		{"empty dns message", emptyDNS, ErrMalformed},
	} {
		if _, err := r.Open(tc.msg); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestResponsePaddingChecked: the client side refuses an answer whose
// padding is not all zeros, as the target refuses such a query.
func TestResponsePaddingChecked(t *testing.T) {
	r := testKeyring(t, 0, nil)
	msg, pq, _ := SealQuery(firstConfig(t, r), testQuery, 0)
	o, _ := r.Open(msg)
	nonce := bytes.Repeat([]byte{1}, responseNonce)
	gcm, iv, _ := responseAEAD(o.secret, o.plain, nonce)
	plain := append(appendVec16(nil, testQuery), 0, 1, 9)
	resp := AppendMessage(nil, Message{Type: MessageResponse, KeyID: nonce, Encrypted: gcm.Seal(nil, iv, plain, aad(MessageResponse, nonce))})
	if _, err := pq.OpenResponse(resp); !errors.Is(err, ErrPadding) {
		t.Fatalf("OpenResponse = %v, want ErrPadding", err)
	}
}

// TestKeyringRotation: the configurations list the current and the next
// key; after a rotation the previous key is still accepted (the grace
// period), the one before it is not; two keyrings of one seed agree.
func TestKeyringRotation(t *testing.T) {
	now := time.Unix(1_000_000*3600, 0)
	clock := func() time.Time { return now }
	r := testKeyring(t, time.Hour, clock)
	cs, err := ParseConfigs(r.Configs())
	if err != nil || len(cs) != 2 {
		t.Fatalf("configs: %v %v", cs, err)
	}
	q0, _, _ := SealQuery(cs[0], testQuery, 0)
	q1, _, _ := SealQuery(cs[1], testQuery, 0)
	if _, err := r.Open(q1); err != nil {
		t.Fatalf("the next key is refused before its period: %v", err)
	}
	now = now.Add(time.Hour)
	cs2, _ := ParseConfigs(r.Configs())
	if !bytes.Equal(cs2[0].PublicKey, cs[1].PublicKey) {
		t.Fatal("after a rotation the current key is not the former next")
	}
	if _, err := r.Open(q0); err != nil {
		t.Fatalf("the previous key is refused in its grace period: %v", err)
	}
	now = now.Add(time.Hour)
	if _, err := r.Open(q0); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a key two periods old: %v, want ErrUnknownKey", err)
	}
	twin := testKeyring(t, time.Hour, clock)
	if !bytes.Equal(twin.Configs(), r.Configs()) {
		t.Fatal("two keyrings of one seed hold different keys")
	}
}

// TestLoadSeed: a missing key file is made (0600) and read back the same;
// a bad one is refused with a message that does not echo it.
func TestLoadSeed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "odoh.key")
	a, err := LoadSeed(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", fi.Mode(), err)
	}
	b, err := LoadSeed(path)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("read back %x, %v", b, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.key")
	os.WriteFile(bad, []byte("c2VjcmV0\n"), 0o600)
	if _, err := LoadSeed(bad); err == nil || bytes.Contains([]byte(err.Error()), []byte("c2VjcmV0")) {
		t.Fatalf("bad key file: %v", err)
	}
}

// TestConfigsSkipOtherVersions: a client keeps the version 0x0001
// configurations of a list and skips the others (§6).
func TestConfigsSkipOtherVersions(t *testing.T) {
	c := Config{KEM: KEMX25519, KDF: KDFSHA256, AEAD: AEADAES128, PublicKey: bytes.Repeat([]byte{1}, 32)}
	b := AppendConfigs(nil, c)
	// Prepend a config of version 0xff06 to the list.
	foreign := []byte{0xff, 0x06, 0, 3, 1, 2, 3}
	list := append(append(bytes.Clone(foreign), b[2:]...), nil...)
	withLen := append([]byte{byte(len(list) >> 8), byte(len(list))}, list...)
	cs, err := ParseConfigs(withLen)
	if err != nil || len(cs) != 1 || !bytes.Equal(cs[0].PublicKey, c.PublicKey) {
		t.Fatalf("ParseConfigs = %v, %v", cs, err)
	}
	if _, err := ParseConfigs(append([]byte{0, byte(len(foreign))}, foreign...)); err == nil {
		t.Fatal("a list without version 0x0001 was taken")
	}
}
