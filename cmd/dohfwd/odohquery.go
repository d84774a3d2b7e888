package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// odohQueryUsage is the command's line in the usage.
const odohQueryUsage = "usage: dohfwd odoh-query --target URL [--relay URL] [--ca FILE] [--configs URL] [--http3] [--full] NAME [TYPE]"

// odohQueryCommand asks one question through an Oblivious DoH relay and
// target (RFC 9230) and prints the answer as `dig +short` does (its
// records' data, one a line), or the whole message with --full, so a
// deployment can be checked with no code. The exit status is 0 when the
// target answered (whatever its rcode, which goes to stderr when not
// NOERROR, as dig's status line would say), 1 when the exchange failed,
// 2 for a bad command line.
func odohQueryCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("odoh-query", stderr)
	var o odohClientOptions
	fs.StringVar(&o.Target, "target", "", "the target's DoH `URL`, https://HOST[:PORT]/PATH")
	fs.StringVar(&o.Relay, "relay", "", "the relay's `URL`, https://HOST[:PORT]/proxy (none: straight to the target, which then sees this address)")
	fs.StringVar(&o.Configs, "configs", "", "the `URL` of the target's keys (default: the target's /.well-known/odohconfigs)")
	fs.StringVar(&o.CAFile, "ca", "", "a PEM `FILE` of roots for the relay's and the target's certificates (default: the system's)")
	fs.BoolVar(&o.HTTP3, "http3", false, "speak HTTP/3 to the relay and the target")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "how long each HTTP exchange may take")
	full := fs.Bool("full", false, "print the whole answer, as dig does without +short")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 1 || fs.NArg() > 2 || o.Target == "" {
		fmt.Fprintln(stderr, odohQueryUsage)
		return 2
	}
	qtype := dns.TypeA
	if fs.NArg() == 2 {
		t, ok := dns.StringToType[strings.ToUpper(fs.Arg(1))]
		if !ok {
			fmt.Fprintf(stderr, "dohfwd odoh-query: %q is not a record type\n", fs.Arg(1))
			return 2
		}
		qtype = t
	}
	c, err := newODoHClient(o)
	if err != nil {
		fmt.Fprintln(stderr, "dohfwd odoh-query:", err)
		return 2
	}
	defer c.Close()
	answer, err := askODoH(ctx, c, fs.Arg(0), qtype)
	if err != nil {
		fmt.Fprintln(stderr, "dohfwd odoh-query:", err)
		return 1
	}
	if *full {
		fmt.Fprintln(stdout, answer.String())
		return 0
	}
	if answer.Rcode != dns.RcodeSuccess {
		fmt.Fprintln(stderr, "dohfwd odoh-query: status", dns.RcodeToString[answer.Rcode])
	}
	writeShort(stdout, answer)
	return 0
}

// askODoH fetches the target's keys and asks name and qtype through c;
// the answer must be the response to that question.
func askODoH(ctx context.Context, c *odohClient, name string, qtype uint16) (*dns.Msg, error) {
	cfg, err := c.fetchConfig(ctx)
	if err != nil {
		return nil, err
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.Id = 0 // RFC 8484 §4.1; the answer is bound to the query by its keys
	q.SetEdns0(1232, false)
	wire, err := q.Pack()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	b, err := c.Exchange(ctx, cfg, wire)
	if err != nil {
		return nil, err
	}
	answer := new(dns.Msg)
	if err := answer.Unpack(b); err != nil {
		return nil, fmt.Errorf("the target's answer: %w", err)
	}
	if !answer.Response || len(answer.Question) != 1 || answer.Question[0].Qtype != qtype ||
		!strings.EqualFold(answer.Question[0].Name, q.Question[0].Name) {
		return nil, errNoAnswer
	}
	return answer, nil
}

// writeShort prints the data of the answer section's records, one a
// line, as dig +short does.
func writeShort(w io.Writer, m *dns.Msg) {
	for _, rr := range m.Answer {
		fmt.Fprintln(w, strings.TrimPrefix(rr.String(), rr.Header().String()))
	}
}
