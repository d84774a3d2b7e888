package odoh

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/scripts/testtool"
)

// vectorsModule is the module whose test-vectors.json holds the ODoH
// test vectors (the generator of RFC 9230's Appendix A, version 0x0001):
// the cloudflare/odoh-go version routedns v0.1.237 requires, which
// scripts/setup.d/26-routedns.sh brings into the module cache. The
// vectors are read from there, not copied into this repository.
const vectorsModule = "github.com/cloudflare/odoh-go@v1.0.1-0.20230926114050-f39fa019b017"

type vectorSuite struct {
	KEM          uint16 `json:"kem_id"`
	KDF          uint16 `json:"kdf_id"`
	AEAD         uint16 `json:"aead_id"`
	Configs      string `json:"odohconfigs"`
	Seed         string `json:"public_key_seed"`
	KeyID        string `json:"key_id"`
	Transactions []struct {
		Query       string `json:"query"`
		QueryPad    int    `json:"queryPaddingLength"`
		Response    string `json:"response"`
		ResponsePad int    `json:"responsePaddingLength"`
		Oblivious   string `json:"obliviousQuery"`
		ObliviousR  string `json:"obliviousResponse"`
	} `json:"transactions"`
}

func loadVectors(t *testing.T) []vectorSuite {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(vectorsModule), "test-vectors.json")
	b, err := os.ReadFile(path)
	if err != nil {
		testtool.Missing(t, "the ODoH test vectors (%v): run scripts/setup.d/26-routedns.sh", err)
	}
	var v []vectorSuite
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestVectors runs the target's code on the ODoH test vectors: the key
// from its seed has the vectors' configuration and key_id; each query
// opens to the vectors' DNS message; each answer sealed under the
// vectors' response nonce is the vectors' response message, byte for
// byte; and the client side opens it back.
func TestVectors(t *testing.T) {
	suites := loadVectors(t)
	n := 0
	for _, s := range suites {
		if s.KEM != KEMX25519 || s.KDF != KDFSHA256 || s.AEAD != AEADAES128 {
			continue
		}
		k, err := DeriveKey(unhex(t, s.Seed))
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendConfigs(nil, k.Config()); !bytes.Equal(got, unhex(t, s.Configs)) {
			t.Errorf("configs = %x, want %s", got, s.Configs)
		}
		if !bytes.Equal(k.ID(), unhex(t, s.KeyID)) {
			t.Errorf("key_id = %x, want %s", k.ID(), s.KeyID)
		}
		cfgs, err := ParseConfigs(unhex(t, s.Configs))
		if err != nil || len(cfgs) != 1 || !bytes.Equal(cfgs[0].PublicKey, k.Config().PublicKey) {
			t.Errorf("ParseConfigs = %v, %v", cfgs, err)
		}
		for i, tx := range s.Transactions {
			m, err := ParseMessage(unhex(t, tx.Oblivious))
			if err != nil {
				t.Fatalf("tx %d: %v", i, err)
			}
			o, err := k.Open(m)
			if err != nil {
				t.Fatalf("tx %d: open: %v", i, err)
			}
			if !bytes.Equal(o.Query, unhex(t, tx.Query)) {
				t.Errorf("tx %d: query = %x, want %s", i, o.Query, tx.Query)
			}
			if len(o.plain) != 4+len(o.Query)+tx.QueryPad {
				t.Errorf("tx %d: plaintext of %d bytes, want %d of padding", i, len(o.plain), tx.QueryPad)
			}
			want := unhex(t, tx.ObliviousR)
			rm, err := ParseMessage(want)
			if err != nil || rm.Type != MessageResponse || len(rm.KeyID) != responseNonce {
				t.Fatalf("tx %d: the vector's response: %+v %v", i, rm, err)
			}
			got, err := o.sealWithNonce(nil, unhex(t, tx.Response), tx.ResponsePad, rm.KeyID)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("tx %d: sealed response = %x\nwant %x", i, got, want)
			}
			pq := &PendingQuery{plain: o.plain, secret: o.secret}
			if dns, err := pq.OpenResponse(want); err != nil || !bytes.Equal(dns, unhex(t, tx.Response)) {
				t.Errorf("tx %d: OpenResponse = %x, %v", i, dns, err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("no vector of the suite DHKEM(X25519)/HKDF-SHA256/AES-128-GCM")
	}
	t.Logf("%d transactions checked", n)
}
