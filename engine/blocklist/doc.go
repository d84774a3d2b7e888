// Package blocklist compiles a policy's block and allow lists into an
// immutable [Set] and answers, on the question path, whether a name is
// blocked and by which rule.
//
// # Lists
//
// A list file is read line by line; each line is recognised on its own:
//
//   - a hosts line, `0.0.0.0 name [name...]` (also 127.0.0.1, :: and ::1;
//     any other address is refused: a hosts file that maps names to real
//     addresses is not a block list), with localhost-style names skipped;
//   - a plain domain, `ads.example.com` (a leading `*.` means its
//     subdomains only);
//   - an adblock-style rule, `||ads.example.com^` (optionally `$important`)
//     and its exception `@@||ads.example.com^` (an allow rule);
//   - a comment (`#`, `!`, an adblock header `[Adblock Plus 2.0]`) or a
//     blank line.
//
// A file whose first significant line is a zone-file directive (`$TTL`,
// `$ORIGIN`) or an SOA record is an RPZ zone (read by a [ZoneParser]: the
// native build reads it with miekg/dns's zone parser, package rpz). Its
// QNAME triggers (`name` the name itself, `*.name` its subdomains) carry
// their own action: `CNAME .` NXDOMAIN, `CNAME *.` NODATA, `CNAME
// rpz-passthru.` an allow rule, `CNAME rpz-drop.` no answer, `A 0.0.0.0`
// or `AAAA ::` the null answer. An RPZ rule is answered with EDE 17
// (Filtered); every other with EDE 15 (Blocked).
//
// A line the reader cannot use is skipped and reported as
// `FILE:LINE: problem` ([LineError]); it never fails the list. Only a file
// that cannot be read fails it, and a [Policy] then keeps its old lists.
//
// # The rule: allow wins
//
// A name is blocked when it or a parent is listed by a block rule and no
// allow rule covers it — an allow rule for the name or any of its parents
// wins over every block rule, however specific (as AdGuard Home's `@@`
// exceptions and blocky's allow lists do). So `allow: [example.com]` lets
// `ads.example.com` through even when a list blocks it; to block a part of
// an allowed domain, allow the narrower names instead. Among the block
// rules that cover a name, the most specific (the longest listed name)
// is the one reported; among rules for the same name, the first loaded
// (lists in configured order, lines in file order).
//
// # The matcher
//
// Names are kept in a table of our own, keyed by a hash of each listed
// name in lower case; [Set.Match] walks the question's name once from its
// last byte to its first, extending the hash by one lowered byte at a
// time, so at every label boundary it holds the hash of that suffix and
// looks it up: one pass, no lowering copy, no allocation. A hit is
// confirmed by comparing the stored name, so a hash collision never
// blocks a name. The listed names live in one string, the table in two
// flat slices: about 50 bytes per listed name (scripts/bench-blocklist).
//
// A [Policy] holds its current Set behind an atomic pointer: a reload
// compiles a whole new Set and swaps it in, so a question sees the old
// lists or the new, never a half.
package blocklist
