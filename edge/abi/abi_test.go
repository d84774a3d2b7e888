package abi

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dohfwd/dohfwd/doh"
	"github.com/dohfwd/dohfwd/engine"
)

// glue reads the Workers glue (edge/workers/*.mjs) as one text.
func glue(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "workers", "*.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .mjs files in edge/workers: %v", err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}

// The JavaScript glue follows the contract: every number it shares with
// the Go side has the value package abi (or engine, for the socket error
// classes) gives it, and every export, import and header name it uses is
// one package abi names.
func TestWorkersGlueFollowsTheABI(t *testing.T) {
	js := glue(t)
	want := map[string]int{
		"InitTCPOnly":           InitTCPOnly,
		"TransportTCP":          TransportTCP,
		"EventRequest":          EventRequest,
		"EventCancel":           EventCancel,
		"EventConnected":        EventConnected,
		"EventRead":             EventRead,
		"EventHeaderSize":       EventHeaderSize,
		"PollHeaderSize":        PollHeaderSize,
		"ErrOther":              int(engine.ErrOther),
		"ErrTimeout":            int(engine.ErrTimeout),
		"ErrRefused":            int(engine.ErrRefused),
		"ErrUnreachable":        int(engine.ErrUnreachable),
		"ErrReset":              int(engine.ErrReset),
		"ErrClosed":             int(engine.ErrClosed),
		"ErrLocal":              int(engine.ErrLocal),
		"EventQuery":            EventQuery,
		"QueryTrace":            QueryTrace,
		"TraceSize":             TraceSize,
		"QueryAnswerHeaderSize": QueryAnswerHeaderSize,
		"QueryAnswerCacheable":  QueryAnswerCacheable,
		"QueryAnswerCacheHit":   QueryAnswerCacheHit,
		"QueryAnswerShared":     QueryAnswerShared,
		"ResultLocal":           int(engine.ResultLocal),
		"ResultStale":           int(engine.ResultStale),
		"MaxMessageSize":        doh.MaxMessageSize,
		"PaddingBlock":          engine.PaddingBlock,
	}
	consts := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^(?:export )?const (\w+) = (\d+);`).FindAllStringSubmatch(js, -1) {
		v, _ := strconv.Atoi(m[2])
		consts[m[1]] = v
	}
	for name, v := range want {
		got, ok := consts[name]
		switch {
		case !ok:
			t.Errorf("the glue does not define %s", name)
		case got != v:
			t.Errorf("the glue has %s = %d; the Go side %d", name, got, v)
		}
	}
	exports := Exports
	called := map[string]bool{}
	for _, m := range regexp.MustCompile(`exports\.(dohfwd_\w+)`).FindAllStringSubmatch(js, -1) {
		called[m[1]] = true
		if !slices.Contains(exports, m[1]) {
			t.Errorf("the glue calls export %q, which package abi does not name", m[1])
		}
	}
	for _, name := range []string{ExportBuffer, ExportInit, ExportPoll} {
		if !called[name] {
			t.Errorf("the glue never calls %s", name)
		}
	}
	imports := []string{ImportOpen, ImportSend, ImportRecv, ImportClose}
	for _, name := range imports {
		if !regexp.MustCompile(`(?m)^\s*` + name + `(: |\()`).MatchString(js) {
			t.Errorf("the glue does not provide import %s", name)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*(sock_\w+)(?:: |\()`).FindAllStringSubmatch(js, -1) {
		if !slices.Contains(imports, m[1]) {
			t.Errorf("the glue provides import %q, which package abi does not name", m[1])
		}
	}
	if !regexp.MustCompile(`\b` + ImportModule + `: sockets\.imports`).MatchString(js) {
		t.Errorf("the glue does not provide its sockets as import module %q", ImportModule)
	}
	m := regexp.MustCompile(`const FORWARDED = \[([^\]]*)\]`).FindStringSubmatch(js)
	if m == nil {
		t.Fatal("the glue has no FORWARDED header list")
	}
	var forwarded []string
	for _, h := range strings.Split(m[1], ",") {
		forwarded = append(forwarded, strings.Trim(strings.TrimSpace(h), `"`))
	}
	var wantHeaders []string
	for _, h := range ForwardedHeaders {
		wantHeaders = append(wantHeaders, strings.ToLower(h))
	}
	if !slices.Equal(forwarded, wantHeaders) {
		t.Errorf("the glue forwards %v; abi.ForwardedHeaders is %v", forwarded, wantHeaders)
	}
}

// The glue reads abi.Front from dohfwd_status by its JSON names: every
// field it reads is one Front has, and it reads them all.
func TestWorkersGlueReadsFront(t *testing.T) {
	js := glue(t)
	names := map[string]bool{}
	ft := reflect.TypeFor[Front]()
	for i := range ft.NumField() {
		name, _, _ := strings.Cut(ft.Field(i).Tag.Get("json"), ",")
		names[name] = false
	}
	if st, ok := reflect.TypeFor[Status]().FieldByName("Front"); !ok || st.Tag.Get("json") != "front" {
		t.Fatal(`Status has no field Front named "front" in JSON`)
	}
	for _, m := range regexp.MustCompile(`front\.(\w+)`).FindAllStringSubmatch(js, -1) {
		if _, ok := names[m[1]]; !ok {
			t.Errorf("the glue reads front.%s, which abi.Front does not have", m[1])
		}
		names[m[1]] = true
	}
	for name, read := range names {
		if !read {
			t.Errorf("the glue never reads front.%s", name)
		}
	}
}
