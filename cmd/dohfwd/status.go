package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/dohfwd/dohfwd/doh/admin"
	"github.com/dohfwd/dohfwd/engine"
)

func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", stderr)
	addr := fs.String("admin", "127.0.0.1:9153", "the server's admin listener `ADDR`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	st, err := fetchStatus(ctx, *addr)
	if err != nil {
		fmt.Fprintln(stderr, "dohfwd status:", err)
		return 1
	}
	writeStatus(stdout, st, time.Now())
	return 0
}

// transportOf is a server's transport as the table shows it ("udp" for
// a status from a server that does not say).
func transportOf(sv engine.ServerStatus) string {
	if sv.Transport == "" {
		return "udp"
	}
	return sv.Transport
}

// connections is an encrypted server's connections in one cell: "open 2,
// handshakes 3 (1 resumed), reused 40, failed 0"; "-" for a plain one.
func connections(cs *engine.ConnStatus) string {
	if cs == nil {
		return "-"
	}
	return fmt.Sprintf("open %d, handshakes %d (%d resumed), reused %d, failed %d", cs.Open, cs.Handshakes, cs.Resumed, cs.Reused, cs.Failed)
}

func fetchStatus(ctx context.Context, addr string) (*admin.Status, error) {
	st := new(admin.Status)
	if err := adminGet(ctx, addr, "/status", st); err != nil {
		return nil, err
	}
	return st, nil
}

// writeStatus prints the status as tables: servers by scope with their
// demotion, then the counters.
func writeStatus(w io.Writer, st *admin.Status, now time.Time) {
	fmt.Fprintf(w, "dohfwd %s  config %s  up %s\n\n", st.Version, st.Config, now.Sub(st.Started).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tSERVER\tSTATE\tDEMOTED UNTIL\tTRANSPORT\tCONNECTIONS")
	for _, sc := range st.Scopes {
		if len(sc.Servers) == 0 {
			fmt.Fprintf(tw, "%s\t-\tno servers\t-\t-\t-\n", sc.Name)
		}
		for _, sv := range sc.Servers {
			state, until := "ok", "-"
			if sv.Demoted && sv.DemotedUntil != nil {
				state = "demoted"
				until = fmt.Sprintf("%s (in %s)", sv.DemotedUntil.Local().Format(time.TimeOnly),
					sv.DemotedUntil.Sub(now).Round(time.Second))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sc.Name, sv.Address, state, until, transportOf(sv), connections(sv.Connections))
		}
	}
	for _, a := range st.FallbackServers {
		fmt.Fprintf(tw, "fallback\t%s\t-\t-\t-\t-\n", a)
	}
	tw.Flush()

	c := st.Counters
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNTER\tVALUE")
	fmt.Fprintf(tw, "in_flight\t%d / %d\n", st.InFlight, st.InFlightCeiling)
	fmt.Fprintf(tw, "upstream_failed\t%d\n", c.UpstreamFailed)
	fmt.Fprintf(tw, "refused\t%d\n", c.Refused)
	fmt.Fprintf(tw, "cancelled\t%d\n", c.Cancelled)
	fmt.Fprintf(tw, "mismatched_replies\t%d\n", c.MismatchedReplies)
	fmt.Fprintf(tw, "cache_hits\t%d\n", c.CacheHits)
	for _, k := range slices.Sorted(maps.Keys(c.Questions)) {
		fmt.Fprintf(tw, "questions %s\t%d\n", k, c.Questions[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.Attempts)) {
		fmt.Fprintf(tw, "attempts %s\t%d\n", k, c.Attempts[k])
	}
	tw.Flush()
}
