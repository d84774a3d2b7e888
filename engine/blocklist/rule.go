package blocklist

import (
	"fmt"
	"strconv"
)

// Rule is one list line that decided, or took part in, a name's verdict.
type Rule struct {
	// List is the list file as configured, or for an allow entry written
	// in the configuration itself its key ("policies.kids.allow[0]").
	List string
	// Line is the rule's 1-based line in List; 0 for a configured entry.
	Line int
	// Name is the listed name, lower case, without the trailing dot.
	Name string
	// Cover says which names the rule is for: Name and its subdomains,
	// Name only (an RPZ trigger) or its subdomains only (`*.Name`).
	Cover Cover
	// Action answers a blocked question: the policy's action, or an RPZ
	// rule's own.
	Action Action
	// RPZ says the rule is an RPZ trigger: EDE 17 (Filtered), not 15.
	RPZ bool
	// Allow says the rule lets names through.
	Allow bool
}

// EDE is the Extended DNS Error info-code for a question this rule blocks.
func (r Rule) EDE() uint16 {
	if r.RPZ {
		return EDEFiltered
	}
	return EDEBlocked
}

// Where is the rule's place, FILE:LINE (or the configuration key), as
// the EDE text, the logs and explain name it.
func (r Rule) Where() string {
	if r.Line == 0 {
		return r.List
	}
	return r.List + ":" + strconv.Itoa(r.Line)
}

// Pattern is the rule's listed name as written in a list: `*.name` for a
// subdomains-only rule.
func (r Rule) Pattern() string {
	if r.Cover == CoverSubdomains {
		return "*." + r.Name
	}
	return r.Name
}

// Cover is which names a rule is for.
type Cover uint8

const (
	CoverDomain     Cover = iota // the name and its subdomains
	CoverExact                   // the name only (RPZ `name`)
	CoverSubdomains              // its subdomains only (`*.name`)
)

var coverNames = [...]string{CoverDomain: "domain", CoverExact: "exact", CoverSubdomains: "subdomains"}

func (c Cover) String() string {
	if int(c) < len(coverNames) {
		return coverNames[c]
	}
	return "cover(" + strconv.Itoa(int(c)) + ")"
}

// LineError is one list line that was skipped.
type LineError struct {
	File    string
	Line    int
	Problem string
}

func (e *LineError) Error() string {
	if e.Line == 0 { // an entry of the configuration, named by its key
		return e.File + ": " + e.Problem
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Problem)
}
