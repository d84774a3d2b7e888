package odoh

import (
	"bytes"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SeedSize is the size of a key seed.
const SeedSize = 32

// Keyring holds a target's keys. They come from one secret seed: the key
// of rotation period e is derived from the seed and e, so replicas that
// share the seed (a key file, as they share certificates) hold the same
// keys and rotate at the same moment without talking to each other. The
// current period's key is the one to use; the next period's is listed
// beside it, so clients that fetched the configurations just before a
// rotation keep working; the previous period's is still accepted, the
// grace period of one rotation for a client's cached configuration. With
// no rotation there is one key for ever.
//
// A Keyring is safe for concurrent use. It never prints its keys.
type Keyring struct {
	seed   []byte
	rotate time.Duration // 0: never
	now    func() time.Time

	mu    sync.Mutex
	state atomic.Pointer[ringState]
}

// ringState is the keys of one rotation period.
type ringState struct {
	period     int64
	until      time.Time // when the next period starts (zero: never)
	prev, cur  *Key      // prev nil without rotation
	next       *Key      // nil without rotation
	configs    []byte    // ObliviousDoHConfigs: cur, then next
	keysByUsed []*Key    // the keys a query may name: cur, next, prev
}

// NewKeyring returns the keys of seed (SeedSize bytes), rotated every
// rotate (0: never); now is the clock (nil: time.Now).
func NewKeyring(seed []byte, rotate time.Duration, now func() time.Time) (*Keyring, error) {
	if len(seed) != SeedSize {
		return nil, fmt.Errorf("odoh: a key seed is %d bytes, not %d", SeedSize, len(seed))
	}
	if rotate < 0 {
		return nil, errors.New("odoh: negative rotation period")
	}
	if now == nil {
		now = time.Now
	}
	r := &Keyring{seed: bytes.Clone(seed), rotate: rotate, now: now}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return r, nil
}

// NewRandomKeyring returns a Keyring of a fresh seed that lives in memory
// only: each start has new keys.
func NewRandomKeyring(rotate time.Duration, now func() time.Time) (*Keyring, error) {
	seed := make([]byte, SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, err
	}
	return NewKeyring(seed, rotate, now)
}

// current is the state of the period now is in, made when it begins.
func (r *Keyring) current() (*ringState, error) {
	st := r.state.Load()
	now := r.now()
	if st != nil && (st.until.IsZero() || now.Before(st.until)) {
		return st, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var period int64
	var until time.Time
	if r.rotate > 0 {
		period = now.UnixNano() / int64(r.rotate)
		until = time.Unix(0, (period+1)*int64(r.rotate))
	}
	if st = r.state.Load(); st != nil && st.period == period && st.until.Equal(until) {
		return st, nil
	}
	st = &ringState{period: period, until: until}
	var err error
	if st.cur, err = r.keyOf(period); err != nil {
		return nil, err
	}
	st.keysByUsed = []*Key{st.cur}
	cfgs := []Config{st.cur.Config()}
	if r.rotate > 0 {
		if st.next, err = r.keyOf(period + 1); err != nil {
			return nil, err
		}
		if st.prev, err = r.keyOf(period - 1); err != nil {
			return nil, err
		}
		st.keysByUsed = append(st.keysByUsed, st.next, st.prev)
		cfgs = append(cfgs, st.next.Config())
	}
	st.configs = AppendConfigs(nil, cfgs...)
	r.state.Store(st)
	return st, nil
}

// keyOf derives the key of a period: DeriveKeyPair of HKDF-Expand(seed,
// "dohfwd odoh key" || period).
func (r *Keyring) keyOf(period int64) (*Key, error) {
	info := binary.BigEndian.AppendUint64([]byte("dohfwd odoh key "), uint64(period))
	ikm, err := hkdf.Key(sha256.New, r.seed, nil, string(info), 32)
	if err != nil {
		return nil, err
	}
	return DeriveKey(ikm)
}

// Configs is the body of GET /.well-known/odohconfigs: the current key's
// configuration, then the next one's.
func (r *Keyring) Configs() []byte {
	st, err := r.current()
	if err != nil {
		return nil
	}
	return st.configs
}

// Open parses and decrypts a query message with the key its key_id
// names: ErrUnknownKey when it names none of the current, next and
// previous keys.
func (r *Keyring) Open(b []byte) (Opened, error) {
	m, err := ParseMessage(b)
	if err != nil {
		return Opened{}, err
	}
	if m.Type != MessageQuery {
		return Opened{}, ErrMessageType
	}
	st, err := r.current()
	if err != nil {
		return Opened{}, err
	}
	for _, k := range st.keysByUsed {
		if bytes.Equal(k.id, m.KeyID) {
			return k.Open(m)
		}
	}
	return Opened{}, ErrUnknownKey
}

// LoadSeed reads the key seed in the file at path, or, when there is no
// such file, makes one and writes it there (mode 0600, created
// exclusively: of replicas starting at once on a shared folder, the one
// that wrote first wins and the others read its seed).
func LoadSeed(path string) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil {
		return parseSeed(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("odoh key file: %w", err)
	}
	seed := make([]byte, SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("odoh key file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return LoadSeed(path)
	}
	if err != nil {
		return nil, fmt.Errorf("odoh key file: %w", err)
	}
	_, err = f.WriteString(seedFileHeader + base64.StdEncoding.EncodeToString(seed) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("odoh key file: %w", err)
	}
	return seed, nil
}

// seedFileHeader opens a key file, saying what it is.
const seedFileHeader = "# dohfwd ODoH key seed: keep it secret; replicas behind one name share it\n"

// parseSeed reads a key file: comment lines, then the seed in base64.
func parseSeed(b []byte) ([]byte, error) {
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		seed, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(seed) != SeedSize {
			return nil, fmt.Errorf("odoh key file: want %d bytes in base64 after the comments", SeedSize)
		}
		return seed, nil
	}
	return nil, errors.New("odoh key file: no seed in it")
}
