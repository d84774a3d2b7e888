// Command wasmsize reports what takes the room in a Go WebAssembly module,
// where `go tool nm -size` cannot look (it reads no wasm): the size of
// each function's code by Go package, from the module's name section.
// Build the module without -s -w so that it has one:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o /tmp/m.wasm ./edge/module
//	go run ./edge/wasmsize /tmp/m.wasm        # packages, largest first
//	go run ./edge/wasmsize -funcs /tmp/m.wasm # functions
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	funcs := flag.Bool("funcs", false, "list functions, not packages")
	top := flag.Int("top", 50, "lines to print")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: wasmsize [-funcs] [-top N] FILE.wasm")
		os.Exit(2)
	}
	data, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m, err := parse(data)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	if len(m.names) == 0 {
		fmt.Fprintln(os.Stderr, "no name section: build without -ldflags \"-s -w\"")
		os.Exit(1)
	}
	sums := map[string]int{}
	total := 0
	for i, size := range m.bodies {
		name := m.names[m.imports+i]
		key := name
		if !*funcs {
			key = packageOf(name)
		}
		sums[key] += size
		total += size
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return sums[keys[i]] > sums[keys[j]] })
	fmt.Printf("%d bytes: code %d, data %d, other %d\n", len(data), total, m.data, len(data)-total-m.data)
	for _, k := range keys[:min(*top, len(keys))] {
		fmt.Printf("%9d %5.1f%%  %s\n", sums[k], 100*float64(sums[k])/float64(total), k)
	}
}

// A function's wasm name is its Go symbol with "/" as "_": the package is
// what comes before the first "." after the module path's dots.
var domain = regexp.MustCompile(`^(?:type_\.)?(?:(?:eq|hash)\.)?((?:vendor_)?(?:github\.com|golang\.org|go\.yaml\.in|gopkg\.in|google\.golang\.org)?[^.]*)`)

func packageOf(name string) string {
	if m := domain.FindStringSubmatch(name); m != nil {
		return strings.TrimPrefix(m[1], "vendor_")
	}
	return name
}

type module struct {
	imports int            // imported functions come first in the index space
	bodies  []int          // code size of each defined function
	names   map[int]string // function index -> name
	data    int            // bytes of the data section
}

var errShort = errors.New("section cut short")

func uleb(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, errShort
	}
	return v, b[n:], nil
}

func parse(b []byte) (*module, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" {
		return nil, errors.New("not a wasm module")
	}
	m := &module{names: map[int]string{}}
	b = b[8:]
	for len(b) > 0 {
		id := b[0]
		size, rest, err := uleb(b[1:])
		if err != nil || uint64(len(rest)) < size {
			return nil, errShort
		}
		sec := rest[:size]
		b = rest[size:]
		switch id {
		case 2:
			err = m.importSection(sec)
		case 10:
			err = m.codeSection(sec)
		case 11:
			m.data = len(sec)
		case 0:
			err = m.customSection(sec)
		}
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *module) importSection(p []byte) error {
	n, p, err := uleb(p)
	for i := uint64(0); i < n && err == nil; i++ {
		for range 2 { // module and field names
			var l uint64
			if l, p, err = uleb(p); err != nil || uint64(len(p)) < l+1 {
				return errShort
			}
			p = p[l:]
		}
		kind := p[0]
		p = p[1:]
		switch kind {
		case 0: // function: type index
			_, p, err = uleb(p)
			m.imports++
		case 1: // table: reftype, limits
			p, err = limits(p[1:])
		case 2: // memory: limits
			p, err = limits(p)
		case 3: // global: type, mutability
			p = p[2:]
		}
	}
	return err
}

func limits(p []byte) ([]byte, error) {
	flags := p[0]
	_, p, err := uleb(p[1:])
	if err == nil && flags&1 != 0 {
		_, p, err = uleb(p)
	}
	return p, err
}

func (m *module) codeSection(p []byte) error {
	n, p, err := uleb(p)
	for i := uint64(0); i < n && err == nil; i++ {
		var l uint64
		if l, p, err = uleb(p); err != nil || uint64(len(p)) < l {
			return errShort
		}
		m.bodies = append(m.bodies, int(l))
		p = p[l:]
	}
	return err
}

func (m *module) customSection(p []byte) error {
	l, p, err := uleb(p)
	if err != nil || uint64(len(p)) < l || string(p[:l]) != "name" {
		return err
	}
	p = p[l:]
	for len(p) > 0 {
		sub := p[0]
		size, rest, err := uleb(p[1:])
		if err != nil || uint64(len(rest)) < size {
			return errShort
		}
		body := rest[:size]
		p = rest[size:]
		if sub != 1 { // function names
			continue
		}
		n, q, err := uleb(body)
		for i := uint64(0); i < n && err == nil; i++ {
			var idx, nl uint64
			if idx, q, err = uleb(q); err != nil {
				break
			}
			if nl, q, err = uleb(q); err != nil || uint64(len(q)) < nl {
				return errShort
			}
			m.names[int(idx)] = string(q[:nl])
			q = q[nl:]
		}
		if err != nil {
			return err
		}
	}
	return nil
}
