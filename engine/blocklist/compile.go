package blocklist

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"unsafe"
)

// Spec is one configured policy: `policies: {NAME: {block, allow, action}}`.
type Spec struct {
	Name   string
	Block  []string // list files
	Allow  []string // domains, or list files (IsFile)
	Action Action   // for every rule but an RPZ rule, which carries its own
}

// IsFile says whether an allow entry names a list file rather than a
// domain: it holds a slash (write ./allow.txt for one in the current
// folder), since a bare file name is also a valid domain name.
func IsFile(entry string) bool { return strings.ContainsRune(entry, '/') }

// ZoneRule is one RPZ QNAME trigger a ZoneParser read.
type ZoneRule struct {
	Line    int
	Trigger string // the name relative to the zone's origin: "ads.example" or "*.ads.example"
	Action  Action // NXDomain, NoData, Null or Drop; unused when Allow
	Allow   bool   // rpz-passthru.
}

// ZoneParser reads an RPZ zone file: each trigger to rule, each record it
// cannot use to bad. Package rpz has the native one (miekg/dns's zone
// parser); the WebAssembly module links none, and refuses RPZ files.
type ZoneParser func(file string, data []byte, rule func(ZoneRule), bad func(line int, problem string))

// Options are how a Set's lists are read.
type Options struct {
	Files Files      // nil = OSFiles
	Zone  ZoneParser // nil: an RPZ file is skipped, with one LineError
	// Bad is told of each line skipped (LineError); nil drops them.
	Bad func(*LineError)
	// Seed keys the names' hash; 0 draws one.
	Seed uint64
}

func (o *Options) files() Files {
	if o.Files == nil {
		return OSFiles{}
	}
	return o.Files
}

// Compile reads spec's lists and compiles them. Bad lines are skipped and
// reported to opt.Bad; only a list that cannot be read is an error.
func Compile(spec Spec, opt Options) (*Set, error) {
	data, err := readLists(spec, opt.files())
	if err != nil {
		return nil, err
	}
	return compileData(spec, data, opt), nil
}

// readLists reads every list file of spec, by name.
func readLists(spec Spec, files Files) (map[string][]byte, error) {
	data := map[string][]byte{}
	read := func(name string) error {
		if _, ok := data[name]; ok {
			return nil
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return fmt.Errorf("policy %s: list %w", spec.Name, err)
		}
		data[name] = b
		return nil
	}
	for _, f := range spec.Block {
		if err := read(f); err != nil {
			return nil, err
		}
	}
	for _, a := range spec.Allow {
		if IsFile(a) {
			if err := read(a); err != nil {
				return nil, err
			}
		}
	}
	return data, nil
}

// compileData compiles spec from its lists' contents.
func compileData(spec Spec, data map[string][]byte, opt Options) *Set {
	seed := opt.Seed
	if seed == 0 {
		seed = rand.Uint64() | 1
	}
	lines := len(spec.Allow)
	for _, b := range data {
		lines += bytes.Count(b, []byte{'\n'}) + 1
	}
	c := &compiler{set: &Set{seed: seed}, action: spec.Action, opt: opt}
	c.block.init(seed, lines)
	c.allow.init(seed, 16)
	c.arena = make([]byte, 0, lines*16)
	c.set.recs = make([]rec, 0, lines)
	for _, f := range spec.Block {
		c.list(f, data[f], false)
	}
	for i, a := range spec.Allow {
		if IsFile(a) {
			c.list(a, data[a], true)
			continue
		}
		c.entry(fmt.Sprintf("policies.%s.allow[%d]", spec.Name, i), a)
	}
	s := c.set
	s.arena = string(c.arena)
	s.block, s.allow = c.block.t, c.allow.t
	s.recs = s.recs[:len(s.recs):len(s.recs)]
	return s
}

// compiler builds one Set.
type compiler struct {
	set          *Set
	arena        []byte
	block, allow tableBuilder
	action       Action
	opt          Options

	// the list being read
	n         uint16
	file      string
	allowList bool
	line      int
}

// list reads one list file.
func (c *compiler) list(file string, data []byte, allow bool) {
	c.begin(file, allow)
	if len(data) == 0 {
		return
	}
	// The text is read in place: nothing keeps a piece of it (add copies
	// each name into the arena), and data is not changed meanwhile.
	text := unsafe.String(&data[0], len(data))
	if isZone(text) {
		c.zone(data)
		return
	}
	add := c.addLine
	c.line = 0
	for len(text) > 0 {
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		c.line++
		if p := parseLine(line, add); p != "" {
			c.bad(c.line, p)
		}
	}
}

// entry adds an allow entry written in the configuration (a domain).
func (c *compiler) entry(key, domain string) {
	c.begin(key, true)
	name, cover, p := cleanName(domain)
	if p != "" {
		c.bad(0, p)
		return
	}
	c.line = 0
	c.add(lineRule{name: name, cover: cover, allow: true}, false, 0)
}

func (c *compiler) begin(file string, allow bool) {
	c.n = uint16(len(c.set.lists))
	c.file, c.allowList = file, allow
	c.set.lists = append(c.set.lists, ListInfo{File: file, Allow: allow})
}

func (c *compiler) addLine(r lineRule) { c.add(r, false, c.action) }

// zone reads an RPZ file through the ZoneParser.
func (c *compiler) zone(data []byte) {
	if c.opt.Zone == nil {
		c.bad(1, "an RPZ zone file, and this build reads none (RPZ lists are read natively only)")
		return
	}
	c.opt.Zone(c.file, data, func(z ZoneRule) {
		name, cover, p := cleanName(z.Trigger)
		if p != "" {
			c.bad(z.Line, p)
			return
		}
		if cover == CoverDomain {
			cover = CoverExact // an RPZ trigger without *. is the name alone
		}
		c.line = z.Line
		c.add(lineRule{name: name, cover: cover, allow: z.Allow}, true, z.Action)
	}, c.bad)
}

// add enters one rule. The first rule for a name and cover stays; a later
// one for the same is counted but not kept.
func (c *compiler) add(r lineRule, rpz bool, action Action) {
	info := &c.set.lists[c.n]
	info.Rules++
	allow := r.allow || c.allowList
	tb := &c.block
	flags := uint8(r.cover) << coverBits
	if allow {
		tb, flags = &c.allow, flags|flagAllow
	}
	if rpz {
		flags |= flagRPZ
	}
	idx := tb.entryFor(r.name, &c.arena)
	e := &tb.t.entries[idx]
	self := r.cover != CoverSubdomains && e.self == none
	sub := r.cover != CoverExact && e.sub == none
	if !self && !sub {
		return
	}
	n := int32(len(c.set.recs))
	c.set.recs = append(c.set.recs, rec{line: uint32(c.line), entry: idx, list: c.n, action: action, flags: flags})
	if self {
		e.self = n
	}
	if sub {
		e.sub = n
	}
}

func (c *compiler) bad(line int, problem string) {
	c.set.lists[c.n].Bad++
	if c.opt.Bad != nil {
		c.opt.Bad(&LineError{File: c.file, Line: line, Problem: problem})
	}
}
