package blocklist

// A table maps listed names to their rules: open addressing with linear
// probing over slots that hold entry numbers, the names themselves in
// the Set's arena (a length byte, then the lower-case name). Flat slices
// of small integers, so a million names cost the GC almost nothing to
// scan and about 50 bytes each in all.

// fnvPrime is FNV-1a's 64-bit prime; names are hashed FNV-1a style from
// their last byte to their first, so that one backward pass over a name
// gives the hash of each of its suffixes (Set.Match).
const fnvPrime = 1099511628211

// step extends a suffix's hash by the (lowered) byte before it.
func step(h uint64, c byte) uint64 { return (h ^ uint64(c)) * fnvPrime }

// hashName is the hash of a whole lower-case name under seed.
func hashName[T string | []byte](seed uint64, name T) uint64 {
	h := seed
	for i := len(name) - 1; i >= 0; i-- {
		h = step(h, name[i])
	}
	return h
}

// spread mixes a hash's bits (FNV's low bits are weak) before they pick a
// slot: splitmix64's finalizer.
func spread(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// none marks an entry's missing rule.
const none = -1

// entry is one listed name: where its text is and its rules, by cover
// (rec numbers, none when absent).
type entry struct {
	off  uint32 // arena offset of the length byte
	self int32  // the rule for the name itself
	sub  int32  // the rule for its subdomains
}

type table struct {
	slots   []uint32 // entry number + 1; 0 is empty; a power of two long
	entries []entry
}

// find returns the entry of name (any case), whose hash is h, or nil.
func (t *table) find(h uint64, name, arena string) *entry {
	if len(t.entries) == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := spread(h) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return nil
		}
		e := &t.entries[s-1]
		if sameName(arena, e.off, name) {
			return e
		}
	}
}

// sameName compares the arena's name at off with name, ignoring name's
// ASCII case (the arena's is lower case).
func sameName[T string | []byte](arena T, off uint32, name string) bool {
	n := int(arena[off])
	if n != len(name) {
		return false
	}
	stored := arena[off+1 : int(off)+1+n]
	for i := 0; i < n; i++ {
		if stored[i] != lower(name[i]) {
			return false
		}
	}
	return true
}

// nameAt is the arena's name at off.
func nameAt(arena string, off uint32) string {
	return arena[off+1 : int(off)+1+int(arena[off])]
}

// builder adds names to a table while its Set is compiled; the arena is
// still a []byte then.
type tableBuilder struct {
	t    table
	seed uint64
}

func (b *tableBuilder) init(seed uint64, hint int) {
	b.seed = seed
	n := 16
	for n < 2*hint {
		n <<= 1
	}
	b.t.slots = make([]uint32, n)
	b.t.entries = make([]entry, 0, hint)
}

// entryFor returns the entry number of the lower-case name, adding it
// (and its text to arena) when new.
func (b *tableBuilder) entryFor(name string, arena *[]byte) uint32 {
	h := hashName(b.seed, name)
	mask := uint64(len(b.t.slots) - 1)
	i := spread(h) & mask
	for ; b.t.slots[i] != 0; i = (i + 1) & mask {
		if n := b.t.slots[i] - 1; sameName(*arena, b.t.entries[n].off, name) {
			return n
		}
	}
	off := uint32(len(*arena))
	*arena = append(*arena, byte(len(name)))
	*arena = append(*arena, name...)
	b.t.entries = append(b.t.entries, entry{off: off, self: none, sub: none})
	b.t.slots[i] = uint32(len(b.t.entries))
	if 2*len(b.t.entries) > len(b.t.slots) {
		b.grow(*arena)
	}
	return uint32(len(b.t.entries) - 1)
}

// grow doubles the slots and places every entry again.
func (b *tableBuilder) grow(arena []byte) {
	slots := make([]uint32, 2*len(b.t.slots))
	mask := uint64(len(slots) - 1)
	for n, e := range b.t.entries {
		i := spread(hashName(b.seed, arena[e.off+1:e.off+1+uint32(arena[e.off])])) & mask
		for slots[i] != 0 {
			i = (i + 1) & mask
		}
		slots[i] = uint32(n + 1)
	}
	b.t.slots = slots
}
