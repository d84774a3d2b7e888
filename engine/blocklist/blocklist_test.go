package blocklist_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dohfwd/dohfwd/engine/blocklist"
	"github.com/dohfwd/dohfwd/engine/blocklist/rpz"
)

// compile builds a Set from in-memory lists (name → text), collecting
// the bad lines.
func compile(t testing.TB, spec blocklist.Spec, lists map[string]string) (*blocklist.Set, []string) {
	t.Helper()
	files := blocklist.MapFiles{}
	for k, v := range lists {
		files[k] = []byte(v)
	}
	var bad []string
	s, err := blocklist.Compile(spec, blocklist.Options{Files: files, Zone: rpz.Parse, Bad: func(e *blocklist.LineError) { bad = append(bad, e.Error()) }})
	if err != nil {
		t.Fatal(err)
	}
	return s, bad
}

// want checks Match's verdict for each name: "" passes, else the
// blocking rule's FILE:LINE.
func want(t *testing.T, s *blocklist.Set, cases map[string]string) {
	t.Helper()
	for name, where := range cases {
		r, blocked := s.Match(name)
		switch {
		case where == "" && blocked:
			t.Errorf("%s: blocked by %s, want passed", name, r.Where())
		case where != "" && !blocked:
			t.Errorf("%s: passed, want blocked by %s", name, where)
		case where != "" && r.Where() != where:
			t.Errorf("%s: blocked by %s, want %s", name, r.Where(), where)
		}
	}
}

// Every line format a list may hold, in one file, each recognised on its
// own line.
func TestListFormatsPerLine(t *testing.T) {
	list := strings.Join([]string{
		"# a hosts-style comment",
		"! an adblock comment",
		"[Adblock Plus 2.0]",
		"",
		"0.0.0.0 hosts-zero.example",          // 5
		"127.0.0.1 hosts-loop.example  # why", // 6
		":: hosts-v6.example hosts-v6b.example",
		"0.0.0.0 localhost",
		"plain.example",         // 9
		"Trailing-Dot.Example.", // 10
		"||adblock.example^",    // 11
		"||important.example^$important",
		"*.wild.example", // 13
	}, "\n")
	s, bad := compile(t, blocklist.Spec{Name: "p", Block: []string{"list.txt"}}, map[string]string{"list.txt": list})
	if len(bad) != 0 {
		t.Fatalf("bad lines: %q", bad)
	}
	want(t, s, map[string]string{
		"hosts-zero.example.":   "list.txt:5",
		"HOSTS-LOOP.example":    "list.txt:6",
		"hosts-v6b.example.":    "list.txt:7",
		"plain.example.":        "list.txt:9",
		"trailing-dot.example.": "list.txt:10",
		"adblock.example.":      "list.txt:11",
		"important.example.":    "list.txt:12",
		"a.wild.example.":       "list.txt:13",
		"wild.example.":         "", // *. covers the subdomains only
		"localhost.":            "",
		"example.":              "",
		"notplain.example.":     "",
	})
}

// A name is blocked when it or a parent is listed; the most specific
// block rule is the one reported.
func TestParentsBlockMostSpecificReported(t *testing.T) {
	s, _ := compile(t, blocklist.Spec{Name: "p", Block: []string{"a", "b"}}, map[string]string{
		"a": "example.com\n",
		"b": "ads.example.com\nexample.com\n",
	})
	want(t, s, map[string]string{
		"example.com.":           "a:1",
		"x.y.example.com.":       "a:1",
		"ads.example.com.":       "b:1",
		"deep.ads.example.com.":  "b:1",
		"notexample.com.":        "",
		"com.":                   "",
		"example.com.evil.test.": "",
	})
}

// An allow rule for the name or a parent wins over every block rule,
// however specific: the "no allow rule covers it".
func TestAllowWinsOverMoreSpecificBlock(t *testing.T) {
	s, _ := compile(t, blocklist.Spec{Name: "p", Block: []string{"block"}, Allow: []string{"example.org", "./allow.txt"}}, map[string]string{
		"block":       "ads.example.com\nexample.org\ntracker.example.org\n@@||cdn.ads.example.com^\nother.test\n",
		"./allow.txt": "||other.test^\n",
	})
	want(t, s, map[string]string{
		"ads.example.com.":        "block:1",
		"cdn.ads.example.com.":    "", // @@ in the block list
		"x.cdn.ads.example.com.":  "",
		"tracker.example.org.":    "", // allow entry for a parent
		"example.org.":            "",
		"other.test.":             "", // allow file
		"sub.other.test.":         "",
		"img.ads.example.com.":    "block:1",
		"unrelated.example.test.": "",
	})
	ex := s.Explain("tracker.example.org.")
	if ex.Blocked() || ex.Block == nil || ex.Block.Where() != "block:3" || ex.Allow == nil || ex.Allow.Where() != "policies.p.allow[0]" {
		t.Fatalf("explain: %+v %+v", ex.Block, ex.Allow)
	}
}

// Bad lines are skipped, each reported as FILE:LINE: problem; the good
// lines around them still count.
func TestBadLinesSkippedAndNamed(t *testing.T) {
	s, bad := compile(t, blocklist.Spec{Name: "p", Block: []string{"l"}}, map[string]string{
		"l": "good.example\n192.0.2.1 real.example\nbad name here\n||noanchor.example\nexa$mple.com\n||x.example^$third-party\nünicode.example\nalso-good.example\n",
	})
	wantBad := []string{
		"l:2: hosts address 192.0.2.1 does not block",
		"l:3: not a domain, a hosts line or an adblock rule",
		"l:4: adblock rule without ^",
		`l:5: "exa$mple.com": "$" is not allowed`,
		`l:6: adblock rule: "$third-party"`,
		"l:7: ", // not ASCII
	}
	if len(bad) != len(wantBad) {
		t.Fatalf("bad lines %q, want %d", bad, len(wantBad))
	}
	for i, w := range wantBad {
		if !strings.HasPrefix(bad[i], w) {
			t.Errorf("bad line %q, want it to start %q", bad[i], w)
		}
	}
	want(t, s, map[string]string{"good.example.": "l:1", "also-good.example.": "l:8", "real.example.": ""})
	if info := s.Lists()[0]; info.Rules != 2 || info.Bad != 6 {
		t.Errorf("list info %+v", info)
	}
}

// RPZ triggers carry their own action and answer with EDE 17; a block
// list's rules carry the policy's action and EDE 15.
func TestRPZTriggersAndActions(t *testing.T) {
	zone := `$TTL 300
@ IN SOA ns.rpz. hostmaster.rpz. 1 3600 600 86400 60
  IN NS ns.rpz.
nx.example      CNAME .
*.nx.example    CNAME .
nodata.example  CNAME *.
drop.example    CNAME rpz-drop.
null.example    A 0.0.0.0
ok.nx.example   CNAME rpz-passthru.
local.example   A 192.0.2.1
`
	s, bad := compile(t, blocklist.Spec{Name: "p", Block: []string{"z.rpz", "h"}, Action: blocklist.Refused}, map[string]string{"z.rpz": zone, "h": "0.0.0.0 hosts.example\n"})
	if len(bad) != 1 || !strings.HasPrefix(bad[0], "z.rpz:10: A 192.0.2.1: local data") {
		t.Fatalf("bad: %q", bad)
	}
	for name, w := range map[string]struct {
		where  string
		action blocklist.Action
		ede    uint16
	}{
		"nx.example.":     {"z.rpz:4", blocklist.NXDomain, 17},
		"a.nx.example.":   {"z.rpz:5", blocklist.NXDomain, 17},
		"nodata.example.": {"z.rpz:6", blocklist.NoData, 17},
		"drop.example.":   {"z.rpz:7", blocklist.Drop, 17},
		"null.example.":   {"z.rpz:8", blocklist.Null, 17},
		"hosts.example.":  {"h:1", blocklist.Refused, 15},
	} {
		r, ok := s.Match(name)
		if !ok || r.Where() != w.where || r.Action != w.action || r.EDE() != w.ede {
			t.Errorf("%s: %v %+v, want %+v", name, ok, r, w)
		}
	}
	want(t, s, map[string]string{
		"ok.nx.example.":     "", // rpz-passthru
		"sub.nodata.example": "", // an RPZ trigger without *. is the name alone
		"local.example.":     "",
	})
}

// A syntax error in a zone is one bad line: the records after it count.
func TestRPZSyntaxErrorSkipsOneLine(t *testing.T) {
	zone := "$ORIGIN rpz.test.\n@ 60 SOA ns. h. 1 2 3 4 5\na.example CNAME .\nb.example CNAME . extra junk\nc.example.rpz.test. CNAME .\nd.outside. CNAME .\n"
	s, bad := compile(t, blocklist.Spec{Name: "p", Block: []string{"z"}}, map[string]string{"z": zone})
	if len(bad) != 2 || !strings.HasPrefix(bad[0], "z:4: ") || !strings.HasPrefix(bad[1], `z:6: "d.outside." is outside the zone`) {
		t.Fatalf("bad: %q", bad)
	}
	want(t, s, map[string]string{"a.example.": "z:3", "c.example.": "z:5", "b.example.": ""})
}

// A $TTL or $ORIGIN the parser refuses is reported once, and the lines
// after it are read without it (it once made the parse start over on the
// same error forever).
func TestRPZBadDirectiveEndsParse(t *testing.T) {
	zone := "$TTL 1@\na.example CNAME .\nb.example CNAMX .\nc.example CNAME .\n"
	done := make(chan struct{})
	var s *blocklist.Set
	var bad []string
	go func() {
		defer close(done)
		s, bad = compile(t, blocklist.Spec{Name: "p", Block: []string{"z"}}, map[string]string{"z": zone})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the zone parse did not end")
	}
	if len(bad) == 0 || !strings.HasPrefix(bad[0], "z:1: ") {
		t.Fatalf("bad: %q", bad)
	}
	want(t, s, map[string]string{"c.example.": "z:4"})
}

// Match costs no allocation, blocked or passed.
func TestMatchAllocatesNothing(t *testing.T) {
	s, _ := compile(t, blocklist.Spec{Name: "p", Block: []string{"l"}, Allow: []string{"ok.ads.example"}}, map[string]string{"l": "ads.example\n"})
	for _, name := range []string{"x.ads.example.", "ok.ads.example.", "www.example.com.", "WWW.Ads.Example."} {
		if n := testing.AllocsPerRun(100, func() { s.Match(name) }); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}

// A nil or empty Set blocks nothing.
func TestEmptySetBlocksNothing(t *testing.T) {
	var s *blocklist.Set
	if _, ok := s.Match("example.com."); ok {
		t.Fatal("nil set blocked")
	}
	e, _ := compile(t, blocklist.Spec{Name: "p"}, nil)
	if _, ok := e.Match("example.com."); ok {
		t.Fatal("empty set blocked")
	}
}

// An unreadable list is an error naming the policy and the file.
func TestMissingListIsAnError(t *testing.T) {
	_, err := blocklist.Compile(blocklist.Spec{Name: "kids", Block: []string{"/nonexistent/list.txt"}}, blocklist.Options{})
	if err == nil || !strings.Contains(err.Error(), "policy kids") || !strings.Contains(err.Error(), "/nonexistent/list.txt") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseAction(t *testing.T) {
	for s, a := range map[string]blocklist.Action{"": blocklist.NXDomain, "nxdomain": blocklist.NXDomain, "null": blocklist.Null, "refused": blocklist.Refused} {
		if got, err := blocklist.ParseAction(s); err != nil || got != a {
			t.Errorf("%q: %v %v", s, got, err)
		}
	}
	if _, err := blocklist.ParseAction("drop"); err == nil {
		t.Error("drop accepted as a policy action")
	}
}
