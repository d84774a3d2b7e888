// Package rpz reads Response Policy Zone files (draft-vixie-dnsop-dns-rpz)
// for package blocklist, with miekg/dns's zone parser: QNAME triggers
// only. It is its own package so that the engine, which the WebAssembly
// module links, does not link miekg/dns (TestEngineLinksNoMiekg): the
// native build hands Parse to blocklist.Options.Zone.
package rpz

import (
	"bytes"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/blocklist"
)

var _ blocklist.ZoneParser = Parse

// Parse reads an RPZ zone: each QNAME trigger to rule, each record or
// line it cannot use to bad (the zone parser's syntax errors too: the
// records after one are read on, so a bad line is never fatal).
//
// The zone's origin is its SOA's owner (the first SOA; the root when
// there is none), and a trigger is a record's owner relative to it. The
// actions: CNAME . (NXDOMAIN), CNAME *. (NODATA), CNAME rpz-passthru.
// (allow), CNAME rpz-drop. (drop), A 0.0.0.0 and AAAA :: (the null
// answer). IP, NSDNAME, NSIP and client-IP triggers, other local data and
// rpz-tcp-only. are not supported: their records are reported as bad.
func Parse(file string, data []byte, rule func(blocklist.ZoneRule), bad func(line int, problem string)) {
	r := &lineReader{data: data}
	apex := ""
	for {
		zp := dns.NewZoneParser(r.resume(), ".", file)
		zp.SetDefaultTTL(3600)
		for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
			line := r.line
			h := rr.Header()
			if apex == "" {
				if _, isSOA := rr.(*dns.SOA); isSOA {
					apex = strings.ToLower(h.Name)
					continue
				}
			}
			read(rr, strings.ToLower(h.Name), apexOr(apex), line, rule, bad)
		}
		err := zp.Err()
		if err == nil {
			return
		}
		line := r.errorLine(err)
		if line <= r.base {
			if r.preLines > 0 {
				// The error is in the directives resume put first: a
				// $ORIGIN or $TTL whose value the parser refuses. Its own
				// line was reported already; parse on without it, or the
				// same error would come back forever.
				r.origin, r.ttl = "", ""
				continue
			}
			line = r.base + 1 // always move on by a line at least
		}
		bad(line, zoneProblem(err))
		if !r.skipTo(line) {
			return
		}
	}
}

func apexOr(apex string) string {
	if apex == "" {
		return "."
	}
	return apex
}

// read turns one record into a rule.
func read(rr dns.RR, owner, apex string, line int, rule func(blocklist.ZoneRule), bad func(int, string)) {
	if owner == apex {
		switch rr.(type) {
		case *dns.SOA, *dns.NS:
			return // the zone's own records
		}
	}
	trigger, ok := relative(owner, apex)
	if !ok {
		bad(line, strconv.Quote(owner)+" is outside the zone "+strconv.Quote(apex))
		return
	}
	for _, kind := range []string{"rpz-ip", "rpz-nsdname", "rpz-nsip", "rpz-client-ip"} {
		if trigger == kind || strings.HasSuffix(trigger, "."+kind) {
			bad(line, kind+" triggers are not supported (QNAME triggers only)")
			return
		}
	}
	z := blocklist.ZoneRule{Line: line, Trigger: trigger}
	switch rr := rr.(type) {
	case *dns.CNAME:
		switch strings.ToLower(rr.Target) {
		case ".":
			z.Action = blocklist.NXDomain
		case "*.":
			z.Action = blocklist.NoData
		case "rpz-passthru.":
			z.Allow = true
		case "rpz-drop.":
			z.Action = blocklist.Drop
		case "rpz-tcp-only.":
			bad(line, "rpz-tcp-only. is not supported")
			return
		default:
			bad(line, "CNAME "+rr.Target+": local data is not supported (only ., *., rpz-passthru. and rpz-drop.)")
			return
		}
	case *dns.A:
		if a, _ := netip.AddrFromSlice(rr.A.To4()); !a.IsUnspecified() {
			bad(line, "A "+rr.A.String()+": local data is not supported (only 0.0.0.0, the null answer)")
			return
		}
		z.Action = blocklist.Null
	case *dns.AAAA:
		if a, _ := netip.AddrFromSlice(rr.AAAA); !a.IsUnspecified() {
			bad(line, "AAAA "+rr.AAAA.String()+": local data is not supported (only ::, the null answer)")
			return
		}
		z.Action = blocklist.Null
	default:
		bad(line, dns.TypeToString[rr.Header().Rrtype]+" record: not an RPZ action (CNAME, or A 0.0.0.0 / AAAA ::)")
		return
	}
	rule(z)
}

// relative is owner without the apex, both lower-case FQDNs.
func relative(owner, apex string) (string, bool) {
	if apex == "." {
		return strings.TrimSuffix(owner, "."), owner != "."
	}
	if !strings.HasSuffix(owner, "."+apex) {
		return "", false
	}
	return owner[:len(owner)-len(apex)-1], true
}

var atLine = regexp.MustCompile(`at line: (\d+):`)

// errorLine is the file's line a zone parser error names (the parser
// counts from where it began, the directives resume put first included),
// or the line last handed out.
func (r *lineReader) errorLine(err error) int {
	if m := atLine.FindStringSubmatch(err.Error()); m != nil {
		if n, e := strconv.Atoi(m[1]); e == nil {
			if line := r.base + n - r.preLines; line > r.base && line <= r.line {
				return line
			}
		}
	}
	return r.line
}

// zoneProblem is the parser's message without its file and position,
// which LineError writes itself.
func zoneProblem(err error) string {
	s := err.Error()
	if i := strings.Index(s, "dns: "); i >= 0 {
		s = s[i+len("dns: "):]
	}
	if i := strings.LastIndex(s, " at line: "); i >= 0 {
		s = s[:i]
	}
	return s
}

// lineReader hands the zone parser its input a line per Read, so that
// when the parser returns a record the line last handed out is the
// record's last. After a syntax error the parsing resumes on the next
// line, under the $ORIGIN and $TTL seen so far.
type lineReader struct {
	data   []byte
	off    int // next byte to hand out
	line   int // lines handed out
	origin string
	ttl    string
	pre    []byte // the directives that begin a resumed parse
	// base is the lines handed out before the parse began, preLines the
	// lines of pre it began with.
	base, preLines int
}

func (r *lineReader) Read(p []byte) (int, error) {
	if len(r.pre) > 0 {
		n := copy(p, r.pre)
		r.pre = r.pre[n:]
		return n, nil
	}
	if r.off >= len(r.data) {
		return 0, io.EOF
	}
	end := bytes.IndexByte(r.data[r.off:], '\n')
	if end < 0 {
		end = len(r.data) - r.off
	} else {
		end++
	}
	if end > len(p) {
		end = len(p) // a line longer than the buffer: the rest next time
		n := copy(p, r.data[r.off:r.off+end])
		r.off += n
		return n, nil
	}
	chunk := r.data[r.off : r.off+end]
	r.note(chunk)
	n := copy(p, chunk)
	r.off += n
	r.line++
	return n, nil
}

// note keeps the directives the lines handed out set.
func (r *lineReader) note(line []byte) {
	f := strings.Fields(string(bytes.TrimSpace(line)))
	if len(f) >= 2 {
		switch strings.ToUpper(f[0]) {
		case "$ORIGIN":
			r.origin = f[1]
		case "$TTL":
			r.ttl = f[1]
		}
	}
}

// skipTo moves past line n (a bad one, or the last line of a bad record);
// false when nothing is left.
func (r *lineReader) skipTo(n int) bool {
	for r.line < n && r.off < len(r.data) {
		end := bytes.IndexByte(r.data[r.off:], '\n')
		if end < 0 {
			r.off = len(r.data)
		} else {
			r.off += end + 1
		}
		r.line++
	}
	if r.line > n {
		// The parser had read past the bad line: go back to the line after it.
		r.off, r.line = lineStart(r.data, n), n
	}
	return r.off < len(r.data)
}

// lineStart is the offset of the line after line n (1-based).
func lineStart(data []byte, n int) int {
	off := 0
	for i := 0; i < n && off < len(data); i++ {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			return len(data)
		}
		off += end + 1
	}
	return off
}

// resume is the reader for a parse (re)starting at the current line.
func (r *lineReader) resume() *lineReader {
	r.pre, r.preLines, r.base = r.pre[:0], 0, r.line
	if r.origin != "" {
		r.pre = append(r.pre, "$ORIGIN "+r.origin+"\n"...)
		r.preLines++
	}
	if r.ttl != "" {
		r.pre = append(r.pre, "$TTL "+r.ttl+"\n"...)
		r.preLines++
	}
	return r
}
