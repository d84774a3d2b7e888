package blocklist

import "fmt"

// Action is how a blocked question is answered.
type Action uint8

const (
	// NXDomain answers that the name does not exist (the default).
	NXDomain Action = iota
	// Null answers A with 0.0.0.0 and AAAA with ::, other types NODATA.
	Null
	// Refused answers REFUSED.
	Refused
	// NoData answers that the name has no record of the type asked (RPZ
	// `CNAME *.`).
	NoData
	// Drop sends no answer at all (RPZ `CNAME rpz-drop.`).
	Drop
)

// EDE info-codes (RFC 8914) of a blocked answer.
const (
	EDEBlocked  = 15 // a block list's rule
	EDEFiltered = 17 // an RPZ rule
)

var actionNames = [...]string{NXDomain: "nxdomain", Null: "null", Refused: "refused", NoData: "nodata", Drop: "drop"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", a)
}

// ParseAction reads a policy's configured action: nxdomain (also ""),
// null or refused. NoData and Drop are RPZ rules' own, not a policy's.
func ParseAction(s string) (Action, error) {
	switch s {
	case "", "nxdomain":
		return NXDomain, nil
	case "null":
		return Null, nil
	case "refused":
		return Refused, nil
	}
	return 0, fmt.Errorf("%q: want nxdomain, null or refused", s)
}
