package blocklist

// Set is a policy's lists, compiled: immutable, safe for any number of
// goroutines. The zero Set and a nil *Set block nothing.
type Set struct {
	seed  uint64
	arena string // the listed names: a length byte, then the name
	block table
	allow table
	recs  []rec
	lists []ListInfo
}

// ListInfo is what one list contributed to a Set.
type ListInfo struct {
	File  string // as configured (or the configuration key of an allow entry)
	Rules int    // rules read from it
	Bad   int    // lines skipped
	Allow bool   // an allow list: every rule in it lets names through
}

// rec is one rule: its line and list, what it does, and its name's entry.
type rec struct {
	line   uint32
	entry  uint32 // in block or allow, by flagAllow
	list   uint16 // in Set.lists
	action Action
	flags  uint8
}

const (
	flagRPZ   = 1 << 0
	flagAllow = 1 << 1
	coverBits = 2 // Cover, shifted
)

// Match reports whether name is blocked, and by which rule. name is a
// domain name in text form as the client asked it: any case, with or
// without the trailing dot. It does not allocate.
func (s *Set) Match(name string) (Rule, bool) {
	if s == nil || len(s.block.entries) == 0 {
		return Rule{}, false
	}
	end := len(name)
	if end > 0 && name[end-1] == '.' {
		end--
	}
	checkAllow := len(s.allow.entries) > 0
	best := int32(none)
	h := s.seed
	for i := end - 1; i >= 0; i-- {
		h = step(h, lower(name[i]))
		if i > 0 && name[i-1] != '.' {
			continue
		}
		suffix := name[i:end]
		if checkAllow && ruleOf(s.allow.find(h, suffix, s.arena), i == 0) != none {
			return Rule{}, false
		}
		if r := ruleOf(s.block.find(h, suffix, s.arena), i == 0); r != none {
			best = r // a longer suffix: more specific
		}
	}
	if best == none {
		return Rule{}, false
	}
	return s.rule(best), true
}

// ruleOf is e's rule for the name itself (self) or for a name below it.
func ruleOf(e *entry, self bool) int32 {
	switch {
	case e == nil:
		return none
	case self:
		return e.self
	default:
		return e.sub
	}
}

// Explanation is every rule that bears on a name: the most specific
// block rule and allow rule that cover it. The name is blocked when
// there is a block rule and no allow rule.
type Explanation struct {
	Block *Rule
	Allow *Rule
}

// Blocked says whether the name explained is blocked.
func (e Explanation) Blocked() bool { return e.Block != nil && e.Allow == nil }

// Explain finds the rules that bear on name (Match's verdict, with the
// allow rule that overrode a block). For `dohfwd explain`; it allocates.
func (s *Set) Explain(name string) Explanation {
	var ex Explanation
	if s == nil {
		return ex
	}
	end := len(name)
	if end > 0 && name[end-1] == '.' {
		end--
	}
	h := s.seed
	for i := end - 1; i >= 0; i-- {
		h = step(h, lower(name[i]))
		if i > 0 && name[i-1] != '.' {
			continue
		}
		suffix := name[i:end]
		if r := ruleOf(s.allow.find(h, suffix, s.arena), i == 0); r != none {
			rule := s.rule(r)
			ex.Allow = &rule
		}
		if r := ruleOf(s.block.find(h, suffix, s.arena), i == 0); r != none {
			rule := s.rule(r)
			ex.Block = &rule
		}
	}
	return ex
}

// rule expands rec n.
func (s *Set) rule(n int32) Rule {
	r := &s.recs[n]
	t := &s.block
	if r.flags&flagAllow != 0 {
		t = &s.allow
	}
	return Rule{
		List:   s.lists[r.list].File,
		Line:   int(r.line),
		Name:   nameAt(s.arena, t.entries[r.entry].off),
		Cover:  Cover(r.flags >> coverBits),
		Action: r.action,
		RPZ:    r.flags&flagRPZ != 0,
		Allow:  r.flags&flagAllow != 0,
	}
}

// Lists is what each list contributed, in configured order (block lists,
// then allow entries).
func (s *Set) Lists() []ListInfo {
	if s == nil {
		return nil
	}
	return s.lists
}

// Len is the number of rules in s.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.recs)
}
