//go:build unix

package host

import (
	"context"
	"testing"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/dohfwd/dohfwd/engine/upstreamtest"
)

const page = 64 << 10

func TestReservedMemoryGrowsInPlace(t *testing.T) {
	t.Parallel()
	m := newLinearMemory(1 << 30)
	if _, ok := m.(*reservedMemory); !ok {
		t.Fatalf("newLinearMemory returned %T, want *reservedMemory on this host", m)
	}
	defer m.Free()
	a := m.Reallocate(page)
	if len(a) != page {
		t.Fatalf("len %d, want %d", len(a), page)
	}
	a[0], a[page-1] = 1, 2
	b := m.Reallocate(4 * page)
	if len(b) != 4*page {
		t.Fatalf("len %d, want %d", len(b), 4*page)
	}
	if unsafe.SliceData(a) != unsafe.SliceData(b) {
		t.Fatal("growing moved the memory; it must grow in place")
	}
	if b[0] != 1 || b[page-1] != 2 || b[4*page-1] != 0 {
		t.Fatalf("contents after growing: %d %d %d", b[0], b[page-1], b[4*page-1])
	}
	b[4*page-1] = 3 // the new pages are writable
	if m.Reallocate(2<<30) != nil {
		t.Fatal("growing past the reservation must fail (nil)")
	}
}

func TestReservedMemoryOutlivesFreeDuringCall(t *testing.T) {
	t.Parallel()
	m := newLinearMemory(1 << 30).(*reservedMemory)
	b := m.Reallocate(page)
	if !m.enter() {
		t.Fatal("enter on a live memory")
	}
	m.Free() // as when the module is closed while a call runs
	b[0] = 7 // still mapped: this would fault if Free had unmapped it
	if m.reserved == nil {
		t.Fatal("unmapped while a call runs")
	}
	m.leave()
	if m.reserved != nil {
		t.Fatal("still mapped after the last call left a freed memory")
	}
	if m.enter() {
		t.Fatal("enter on a freed memory must fail")
	}
}

// The module's Go heap grows while it serves; its memory must not move
// (wazero's default copies it whole on every growth).
func TestInstanceMemoryStaysPutUnderLoad(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	e := startEdge(t, edgeConfig(up), 1)
	in := e.pool.all[0]
	base := func() unsafe.Pointer {
		b, ok := in.mod.Memory().Read(0, 1)
		if !ok {
			t.Fatal("memory unreadable")
		}
		return unsafe.Pointer(unsafe.SliceData(b))
	}
	before, pages := base(), in.mod.Memory().Size()
	for i := range 300 {
		m, _ := e.post(t, query(dns.Fqdn("n"+string(rune('a'+i%26))+".example.org"), dns.TypeA))
		wantAnswer(t, m, "192.0.2.1")
	}
	if base() != before {
		t.Fatalf("memory moved while serving (%d -> %d bytes)", pages, in.mod.Memory().Size())
	}
	t.Logf("memory %d -> %d bytes, in place", pages, in.mod.Memory().Size())
}

func TestClosedInstanceRefusesCalls(t *testing.T) {
	t.Parallel()
	up := upstreamtest.Start(t, upstreamtest.Answer("@ 60 IN A 192.0.2.1"))
	in, err := testRuntime(t).NewInstance(context.Background(), edgeConfig(up))
	if err != nil {
		t.Fatal(err)
	}
	in.Close(context.Background())
	if _, err := in.Serve(context.Background(), []byte("x")); err != errClosed {
		t.Fatalf("Serve on a closed instance: %v, want errClosed", err)
	}
}
