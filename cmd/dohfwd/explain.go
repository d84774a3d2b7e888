package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"

	"github.com/dohfwd/dohfwd/engine"
)

// explainCommand prints what a running server would do with a question,
// from its admin GET /explain: nothing is sent upstream.
func explainCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("explain", stderr)
	addr := fs.String("admin", "127.0.0.1:9153", "the server's admin listener `ADDR`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fmt.Fprintln(stderr, "usage: dohfwd explain [--admin ADDR] NAME [TYPE]")
		return 2
	}
	qtype := "A"
	if fs.NArg() == 2 {
		qtype = fs.Arg(1)
	}
	x, err := fetchExplain(ctx, *addr, fs.Arg(0), qtype)
	if err != nil {
		fmt.Fprintln(stderr, "dohfwd explain:", err)
		return 1
	}
	writeExplain(stdout, x)
	return 0
}

func fetchExplain(ctx context.Context, addr, name, qtype string) (*engine.Explanation, error) {
	x := new(engine.Explanation)
	if err := adminGet(ctx, addr, "/explain?"+url.Values{"name": {name}, "type": {qtype}}.Encode(), x); err != nil {
		return nil, err
	}
	return x, nil
}

// writeExplain prints an explanation as tables: the routing decision, the
// candidates, the servers in order, the ceiling.
func writeExplain(w io.Writer, x *engine.Explanation) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "question\t%s %s\n", x.Name, x.Type)
	fmt.Fprintf(tw, "scope\t%s (%s)\n", x.Scope, x.Route)
	fmt.Fprintf(tw, "why\t%s\n", x.Why)
	fmt.Fprintf(tw, "outcome\t%s\n", x.Outcome)
	fmt.Fprintf(tw, "ceiling\t%d / %d in flight, refuses: %s\n", x.InFlight, x.InFlightCeiling, yesNo(x.CeilingRefuses))
	tw.Flush()
	if x.Local {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CANDIDATE\tLOCAL\tCACHE\tTTL LEFT\tIN FLIGHT")
	for _, c := range x.Candidates {
		cache, ttl := "-", "-"
		if c.Cached != "" {
			cache, ttl = c.Cached, fmt.Sprintf("%.0fs", c.TTLRemaining)
		} else if c.Stale != "" {
			cache, ttl = "stale "+c.Stale, fmt.Sprintf("%.0fs of stale window", c.StaleRemaining)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, yesNo(c.Local), cache, ttl, yesNo(c.InFlight))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tSERVER\tSTATE\tDEMOTED FOR\tNEXT")
	if len(x.Servers) == 0 {
		fmt.Fprintln(tw, "-\tno servers\t-\t-\t-")
	}
	for i, s := range x.Servers {
		state, left, next := "ok", "-", ""
		if s.Demoted {
			state, left = "demoted", fmt.Sprintf("%.0fs", s.Remaining)
		}
		if s.Next {
			next = "<- next attempt"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i+1, s.Address, state, left, next)
	}
	tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
