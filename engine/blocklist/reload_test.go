package blocklist_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dohfwd/dohfwd/engine/blocklist"
)

// A changed file is compiled again and swapped in; an unchanged one is
// not; a file that cannot be read keeps the old lists.
func TestReloadSwapsChangedKeepsOldOnError(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "l.txt")
	write := func(s string) {
		if err := os.WriteFile(list, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.example\n")
	p, err := blocklist.New(blocklist.Spec{Name: "p", Block: []string{list}}, blocklist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := p.Reload(false); changed || err != nil {
		t.Fatalf("unchanged file: %v %v", changed, err)
	}
	write("b.example\nc.example\n")
	if changed, err := p.Reload(false); !changed || err != nil {
		t.Fatalf("changed file: %v %v", changed, err)
	}
	if _, ok := p.Match("a.example."); ok {
		t.Error("old rule still blocks")
	}
	if _, ok := p.Match("c.example."); !ok {
		t.Error("new rule does not block")
	}
	os.Remove(list)
	if changed, err := p.Reload(true); changed || err == nil {
		t.Fatalf("missing file: %v %v", changed, err)
	}
	if _, ok := p.Match("c.example."); !ok {
		t.Error("lists not kept after a failed reload")
	}
}

// Questions during reloads see the old Set or the new, never a half: each
// version blocks all of its names or none (run with -race).
func TestReloadIsAtomicUnderQueries(t *testing.T) {
	files := blocklist.MapFiles{"l": []byte("v0a.example\nv0b.example\n")}
	reg := blocklist.NewRegistry(blocklist.Options{Files: files})
	if err := reg.Apply([]blocklist.Spec{{Name: "p", Block: []string{"l"}}}); err != nil {
		t.Fatal(err)
	}
	p := reg.Policy("p")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := p.Set()
			_, a := s.Match("v0a.example.")
			_, b := s.Match("v0b.example.")
			if a != b {
				t.Error("half a set")
				return
			}
		}
	}()
	for i := range 50 {
		if i%2 == 0 {
			files["l"] = []byte("other.example\n")
		} else {
			files["l"] = []byte("v0a.example\nv0b.example\n")
		}
		if _, err := p.Reload(true); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// Watch checks the files every interval: a change is in force after the
// next tick, not before.
func TestWatchReloadsEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		files := lockedFiles{mu: &mu, m: blocklist.MapFiles{"l": []byte("a.example\n")}}
		reg := blocklist.NewRegistry(blocklist.Options{Files: files})
		if err := reg.Apply([]blocklist.Spec{{Name: "p", Block: []string{"l"}}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		events := make(chan blocklist.ReloadEvent, 4)
		go reg.Watch(ctx, 30*time.Second, func(e blocklist.ReloadEvent) { events <- e })
		mu.Lock()
		files.m["l"] = []byte("bb.example\n")
		mu.Unlock()
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if _, ok := reg.Policy("p").Match("bb.example."); ok {
			t.Fatal("reloaded before the interval")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if _, ok := reg.Policy("p").Match("bb.example."); !ok {
			t.Fatal("not reloaded at the interval")
		}
		if e := <-events; e.Policy != "p" || !e.Changed || e.Err != nil {
			t.Fatalf("event %+v", e)
		}
		cancel()
	})
}

type lockedFiles struct {
	mu *sync.Mutex
	m  blocklist.MapFiles
}

func (f lockedFiles) ReadFile(n string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m.ReadFile(n)
}

func (f lockedFiles) Stat(n string) (os.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m.Stat(n)
}

// FuzzParseList: no list text crashes the line or zone readers, and
// Match and Explain stay safe on whatever Set they compiled.
func FuzzParseList(f *testing.F) {
	for _, s := range []string{"0.0.0.0 a.example\n", "||b.example^\n@@||c.b.example^\n", "*.d.example\n# x\n", "$TTL 1\n@ SOA a. b. 1 2 3 4 5\nx CNAME .\n", "\xff\x00..\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, _ := compile(t, blocklist.Spec{Name: "p", Block: []string{"l"}}, map[string]string{"l": text})
		for _, name := range []string{"a.example.", "x.", "."} {
			s.Match(name)
			s.Explain(name)
		}
	})
}
