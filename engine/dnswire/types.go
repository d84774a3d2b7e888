package dnswire

import "strconv"

// Sizes of DNS messages.
const (
	MinMsgSize     = 512   // the size every UDP client accepts (RFC 1035 §2.3.4)
	DefaultMsgSize = 4096  // the EDNS size most resolvers advertise
	MaxMsgSize     = 65535 // the largest message TCP can carry
	HeaderLen      = 12
)

// Classes.
const (
	ClassINET   uint16 = 1
	ClassCSNET  uint16 = 2
	ClassCHAOS  uint16 = 3
	ClassHESIOD uint16 = 4
	ClassNONE   uint16 = 254
	ClassANY    uint16 = 255
)

// Opcodes.
const (
	OpcodeQuery  = 0
	OpcodeIQuery = 1
	OpcodeStatus = 2
	OpcodeNotify = 4
	OpcodeUpdate = 5
)

// Response codes; those above 15 need the EDNS extended rcode.
const (
	RcodeSuccess                    = 0  // NOERROR
	RcodeFormatError                = 1  // FORMERR
	RcodeServerFailure              = 2  // SERVFAIL
	RcodeNameError                  = 3  // NXDOMAIN
	RcodeNotImplemented             = 4  // NOTIMP
	RcodeRefused                    = 5  // REFUSED
	RcodeYXDomain                   = 6  // YXDOMAIN
	RcodeYXRrset                    = 7  // YXRRSET
	RcodeNXRrset                    = 8  // NXRRSET
	RcodeNotAuth                    = 9  // NOTAUTH
	RcodeNotZone                    = 10 // NOTZONE
	RcodeStatefulTypeNotImplemented = 11 // DSOTYPENI
	RcodeBadSig                     = 16 // BADSIG
	RcodeBadVers                    = 16 // BADVERS
	RcodeBadKey                     = 17 // BADKEY
	RcodeBadTime                    = 18 // BADTIME
	RcodeBadMode                    = 19 // BADMODE
	RcodeBadName                    = 20 // BADNAME
	RcodeBadAlg                     = 21 // BADALG
	RcodeBadTrunc                   = 22 // BADTRUNC
	RcodeBadCookie                  = 23 // BADCOOKIE
)

// EDNS option codes (IANA "DNS EDNS0 Option Codes").
const (
	EDNS0NSID         uint16 = 3
	EDNS0SUBNET       uint16 = 8  // client subnet, RFC 7871
	EDNS0COOKIE       uint16 = 10 // RFC 7873
	EDNS0TCPKEEPALIVE uint16 = 11 // RFC 7828
	EDNS0PADDING      uint16 = 12 // RFC 7830
	EDNS0EDE          uint16 = 15 // extended DNS error, RFC 8914
)

// Extended DNS Error codes the forwarder gives (RFC 8914 §4).
const (
	ExtendedErrorCodeOther                = 0
	ExtendedErrorCodeStaleAnswer          = 3
	ExtendedErrorCodeProhibited           = 18
	ExtendedErrorCodeNoReachableAuthority = 22
)

var rcodeNames = [...]string{
	0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP",
	5: "REFUSED", 6: "YXDOMAIN", 7: "YXRRSET", 8: "NXRRSET", 9: "NOTAUTH",
	10: "NOTZONE", 11: "DSOTYPENI", 16: "BADSIG", 17: "BADKEY", 18: "BADTIME",
	19: "BADMODE", 20: "BADNAME", 21: "BADALG", 22: "BADTRUNC", 23: "BADCOOKIE",
}

var opcodeNames = [...]string{0: "QUERY", 1: "IQUERY", 2: "STATUS", 4: "NOTIFY", 5: "UPDATE"}

var classNames = map[uint16]string{
	ClassINET: "IN", ClassCSNET: "CS", ClassCHAOS: "CH", ClassHESIOD: "HS",
	ClassNONE: "NONE", ClassANY: "ANY",
}

// TypeString gives a type's mnemonic, or TYPEn for one without
// (RFC 3597 §5).
func TypeString(t uint16) string {
	if s, ok := TypeName(t); ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// TypeName gives a type's mnemonic; false for one without.
func TypeName(t uint16) (string, bool) {
	if t < 256 {
		s := typeNames[t]
		return s, s != ""
	}
	s, ok := bigTypeNames[t]
	return s, ok
}

// ClassString gives a class's mnemonic, or CLASSn for one without.
func ClassString(c uint16) string {
	if s, ok := classNames[c]; ok {
		return s
	}
	return "CLASS" + strconv.Itoa(int(c))
}

// RcodeString gives a response code's mnemonic, or RCODEn for one
// without.
func RcodeString(rcode int) string {
	if s, ok := RcodeName(rcode); ok {
		return s
	}
	return "RCODE" + strconv.Itoa(rcode)
}

// RcodeName gives a response code's mnemonic; false for one without.
func RcodeName(rcode int) (string, bool) {
	if rcode >= 0 && rcode < len(rcodeNames) && rcodeNames[rcode] != "" {
		return rcodeNames[rcode], true
	}
	return "", false
}

// OpcodeString gives an opcode's mnemonic, or OPCODEn for one without.
func OpcodeString(op int) string {
	if op >= 0 && op < len(opcodeNames) && opcodeNames[op] != "" {
		return opcodeNames[op]
	}
	return "OPCODE" + strconv.Itoa(op)
}

// ExtendedErrorText gives an Extended DNS Error code's text, or "" for an
// unassigned code.
func ExtendedErrorText(code uint16) string {
	if int(code) < len(edeTexts) {
		return edeTexts[code]
	}
	return ""
}

// RR types (IANA "Resource Record (RR) TYPEs"), named as in presentation format.
const (
	TypeNone       uint16 = 0
	TypeA          uint16 = 1
	TypeNS         uint16 = 2
	TypeMD         uint16 = 3
	TypeMF         uint16 = 4
	TypeCNAME      uint16 = 5
	TypeSOA        uint16 = 6
	TypeMB         uint16 = 7
	TypeMG         uint16 = 8
	TypeMR         uint16 = 9
	TypeNULL       uint16 = 10
	TypePTR        uint16 = 12
	TypeHINFO      uint16 = 13
	TypeMINFO      uint16 = 14
	TypeMX         uint16 = 15
	TypeTXT        uint16 = 16
	TypeRP         uint16 = 17
	TypeAFSDB      uint16 = 18
	TypeX25        uint16 = 19
	TypeISDN       uint16 = 20
	TypeRT         uint16 = 21
	TypeNSAPPTR    uint16 = 23
	TypeSIG        uint16 = 24
	TypeKEY        uint16 = 25
	TypePX         uint16 = 26
	TypeGPOS       uint16 = 27
	TypeAAAA       uint16 = 28
	TypeLOC        uint16 = 29
	TypeNXT        uint16 = 30
	TypeEID        uint16 = 31
	TypeNIMLOC     uint16 = 32
	TypeSRV        uint16 = 33
	TypeATMA       uint16 = 34
	TypeNAPTR      uint16 = 35
	TypeKX         uint16 = 36
	TypeCERT       uint16 = 37
	TypeDNAME      uint16 = 39
	TypeOPT        uint16 = 41
	TypeAPL        uint16 = 42
	TypeDS         uint16 = 43
	TypeSSHFP      uint16 = 44
	TypeIPSECKEY   uint16 = 45
	TypeRRSIG      uint16 = 46
	TypeNSEC       uint16 = 47
	TypeDNSKEY     uint16 = 48
	TypeDHCID      uint16 = 49
	TypeNSEC3      uint16 = 50
	TypeNSEC3PARAM uint16 = 51
	TypeTLSA       uint16 = 52
	TypeSMIMEA     uint16 = 53
	TypeHIP        uint16 = 55
	TypeNINFO      uint16 = 56
	TypeRKEY       uint16 = 57
	TypeTALINK     uint16 = 58
	TypeCDS        uint16 = 59
	TypeCDNSKEY    uint16 = 60
	TypeOPENPGPKEY uint16 = 61
	TypeCSYNC      uint16 = 62
	TypeZONEMD     uint16 = 63
	TypeSVCB       uint16 = 64
	TypeHTTPS      uint16 = 65
	TypeSPF        uint16 = 99
	TypeUINFO      uint16 = 100
	TypeUID        uint16 = 101
	TypeGID        uint16 = 102
	TypeUNSPEC     uint16 = 103
	TypeNID        uint16 = 104
	TypeL32        uint16 = 105
	TypeL64        uint16 = 106
	TypeLP         uint16 = 107
	TypeEUI48      uint16 = 108
	TypeEUI64      uint16 = 109
	TypeNXNAME     uint16 = 128
	TypeTKEY       uint16 = 249
	TypeTSIG       uint16 = 250
	TypeIXFR       uint16 = 251
	TypeAXFR       uint16 = 252
	TypeMAILB      uint16 = 253
	TypeMAILA      uint16 = 254
	TypeANY        uint16 = 255
	TypeURI        uint16 = 256
	TypeCAA        uint16 = 257
	TypeAVC        uint16 = 258
	TypeAMTRELAY   uint16 = 260
	TypeRESINFO    uint16 = 261
	TypeTA         uint16 = 32768
	TypeDLV        uint16 = 32769
	TypeReserved   uint16 = 65535
)

// typeNames holds the mnemonics of types below 256; bigTypeNames the rest.
var typeNames = [256]string{
	TypeNone:       "None",
	TypeA:          "A",
	TypeNS:         "NS",
	TypeMD:         "MD",
	TypeMF:         "MF",
	TypeCNAME:      "CNAME",
	TypeSOA:        "SOA",
	TypeMB:         "MB",
	TypeMG:         "MG",
	TypeMR:         "MR",
	TypeNULL:       "NULL",
	TypePTR:        "PTR",
	TypeHINFO:      "HINFO",
	TypeMINFO:      "MINFO",
	TypeMX:         "MX",
	TypeTXT:        "TXT",
	TypeRP:         "RP",
	TypeAFSDB:      "AFSDB",
	TypeX25:        "X25",
	TypeISDN:       "ISDN",
	TypeRT:         "RT",
	TypeNSAPPTR:    "NSAP-PTR",
	TypeSIG:        "SIG",
	TypeKEY:        "KEY",
	TypePX:         "PX",
	TypeGPOS:       "GPOS",
	TypeAAAA:       "AAAA",
	TypeLOC:        "LOC",
	TypeNXT:        "NXT",
	TypeEID:        "EID",
	TypeNIMLOC:     "NIMLOC",
	TypeSRV:        "SRV",
	TypeATMA:       "ATMA",
	TypeNAPTR:      "NAPTR",
	TypeKX:         "KX",
	TypeCERT:       "CERT",
	TypeDNAME:      "DNAME",
	TypeOPT:        "OPT",
	TypeAPL:        "APL",
	TypeDS:         "DS",
	TypeSSHFP:      "SSHFP",
	TypeIPSECKEY:   "IPSECKEY",
	TypeRRSIG:      "RRSIG",
	TypeNSEC:       "NSEC",
	TypeDNSKEY:     "DNSKEY",
	TypeDHCID:      "DHCID",
	TypeNSEC3:      "NSEC3",
	TypeNSEC3PARAM: "NSEC3PARAM",
	TypeTLSA:       "TLSA",
	TypeSMIMEA:     "SMIMEA",
	TypeHIP:        "HIP",
	TypeNINFO:      "NINFO",
	TypeRKEY:       "RKEY",
	TypeTALINK:     "TALINK",
	TypeCDS:        "CDS",
	TypeCDNSKEY:    "CDNSKEY",
	TypeOPENPGPKEY: "OPENPGPKEY",
	TypeCSYNC:      "CSYNC",
	TypeZONEMD:     "ZONEMD",
	TypeSVCB:       "SVCB",
	TypeHTTPS:      "HTTPS",
	TypeSPF:        "SPF",
	TypeUINFO:      "UINFO",
	TypeUID:        "UID",
	TypeGID:        "GID",
	TypeUNSPEC:     "UNSPEC",
	TypeNID:        "NID",
	TypeL32:        "L32",
	TypeL64:        "L64",
	TypeLP:         "LP",
	TypeEUI48:      "EUI48",
	TypeEUI64:      "EUI64",
	TypeNXNAME:     "NXNAME",
	TypeTKEY:       "TKEY",
	TypeTSIG:       "TSIG",
	TypeIXFR:       "IXFR",
	TypeAXFR:       "AXFR",
	TypeMAILB:      "MAILB",
	TypeMAILA:      "MAILA",
	TypeANY:        "ANY",
}

var bigTypeNames = map[uint16]string{
	TypeURI:      "URI",
	TypeCAA:      "CAA",
	TypeAVC:      "AVC",
	TypeAMTRELAY: "AMTRELAY",
	TypeRESINFO:  "RESINFO",
	TypeTA:       "TA",
	TypeDLV:      "DLV",
	TypeReserved: "Reserved",
}

// edeTexts holds the Extended DNS Error codes' texts (RFC 8914 §5.2).
var edeTexts = [...]string{
	0:  "Other",
	1:  "Unsupported DNSKEY Algorithm",
	2:  "Unsupported DS Digest Type",
	3:  "Stale Answer",
	4:  "Forged Answer",
	5:  "DNSSEC Indeterminate",
	6:  "DNSSEC Bogus",
	7:  "Signature Expired",
	8:  "Signature Not Yet Valid",
	9:  "DNSKEY Missing",
	10: "RRSIGs Missing",
	11: "No Zone Key Bit Set",
	12: "NSEC Missing",
	13: "Cached Error",
	14: "Not Ready",
	15: "Blocked",
	16: "Censored",
	17: "Filtered",
	18: "Prohibited",
	19: "Stale NXDOMAIN Answer",
	20: "Not Authoritative",
	21: "Not Supported",
	22: "No Reachable Authority",
	23: "Network Error",
	24: "Invalid Data",
	25: "Signature Expired Before Valid",
	26: "Too Early",
	27: "Unsupported NSEC3 Iterations Value",
	28: "Unable To Conform To Policy",
	29: "Synthesized",
	30: "Invalid Query Type",
}
