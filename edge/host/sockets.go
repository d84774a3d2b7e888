package host

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// socket is one of the module's sockets. The imports (inside a poll)
// open, send on and close it; a read or a TCP connect (on a goroutine of
// its own) comes back as an event, unless the socket was closed
// meanwhile. A UDP socket's reads are waited for by the socket's own
// goroutine (udp.go); a TCP socket's each run on a kept reader goroutine.
// While a TCP connect goes on, what the module sends waits in pending
// and a read it asks for in readMax/readDeadline: the connect's
// goroutine carries them out once connected.
type socket struct {
	fd           uint32
	mu           sync.Mutex
	sock         engine.Socket // nil while a TCP connect is under way
	reading      bool          // a read is under way, or asked for while connecting
	closed       bool
	pending      []byte // sent while connecting
	readMax      uint32 // the read asked for (while connecting; UDP: always)
	readDeadline time.Time
	udp          *udpWait // a UDP socket's descriptor and its waiter's state; nil for TCP
}

// close closes s; a read under way ends, and its result is dropped.
func (s *socket) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	sock := s.sock
	s.closed = true
	if s.udp != nil && !s.udp.closable(sock) {
		sock = nil // its waiter closes it
	}
	s.mu.Unlock()
	if sock != nil {
		sock.Close()
	}
}

type instanceKey struct{}

func withInstance(ctx context.Context, in *Instance) context.Context {
	return context.WithValue(ctx, instanceKey{}, in)
}

func instanceOf(ctx context.Context) *Instance {
	in, _ := ctx.Value(instanceKey{}).(*Instance)
	return in
}

// classOf is the code of err: its engine.ErrorClass.
func classOf(err error) uint32 {
	var se *engine.SocketError
	if errors.As(err, &se) && se.Class != 0 {
		return uint32(se.Class)
	}
	return uint32(engine.ErrOther)
}

func deadlineOf(ns uint64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(ns))
}

// add registers a new socket and returns it.
func (in *Instance) add(sock engine.Socket) *socket {
	return in.register(&socket{sock: sock})
}

// register numbers s and registers it.
func (in *Instance) register(s *socket) *socket {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.nextFD++
	for in.nextFD == 0 || in.sockets[in.nextFD] != nil {
		in.nextFD++
	}
	s.fd = in.nextFD
	in.sockets[s.fd] = s
	return s
}

func (in *Instance) socket(fd uint32) *socket {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.sockets[fd]
}

// open is sock_open: UDP at once, TCP connecting on a goroutine of its own.
func (in *Instance) open(t engine.Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (uint32, uint32) {
	if t == engine.UDP {
		sock, err := in.network.Open(t, server, source, deadline)
		if err != nil {
			return 0, classOf(err)
		}
		return in.openUDP(sock, server).fd, 0
	}
	s := in.add(nil)
	go func() {
		sock, err := in.network.Open(t, server, source, deadline)
		s.mu.Lock()
		closed := s.closed
		if closed || err != nil {
			s.mu.Unlock()
			if sock != nil {
				sock.Close()
			}
			if !closed {
				in.event(&abi.Event{Kind: abi.EventConnected, ID: s.fd, Code: classOf(err)})
			}
			return
		}
		// Connected: no event (the read that follows tells). What the
		// module sent meanwhile goes first, under s.mu so that a later
		// sock_send follows it; a read it asked for starts.
		s.sock = sock
		var sendErr error
		if len(s.pending) > 0 {
			sendErr = sock.Send(s.pending)
			s.pending = nil
		}
		wantRead, max, readDeadline := s.reading, s.readMax, s.readDeadline
		s.mu.Unlock()
		switch {
		case sendErr != nil && wantRead:
			s.mu.Lock()
			s.reading = false
			s.mu.Unlock()
			in.event(&abi.Event{Kind: abi.EventRead, ID: s.fd, Code: classOf(sendErr)})
		case wantRead:
			in.startRead(s, sock, max, readDeadline)
		}
	}()
	return s.fd, 0
}

var readBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// read is sock_recv: one read of at most max bytes on a reader goroutine
// (startRead), its result an event. A read already under way answers this
// wait too.
func (in *Instance) read(s *socket, max uint32, deadline time.Time) uint32 {
	s.mu.Lock()
	sock := s.sock
	if s.closed {
		s.mu.Unlock()
		return uint32(engine.ErrClosed)
	}
	if s.reading {
		s.mu.Unlock()
		return 0
	}
	if s.udp != nil {
		code := in.readUDP(s, max)
		s.mu.Unlock()
		return code
	}
	s.reading = true
	if sock == nil { // connecting: the connect's goroutine starts the read
		s.readMax, s.readDeadline = max, deadline
		s.mu.Unlock()
		return 0
	}
	s.mu.Unlock()
	in.startRead(s, sock, max, deadline)
	return 0
}

// readJob is one read for a reader goroutine (startRead).
type readJob struct {
	s        *socket
	sock     engine.Socket
	max      uint32
	deadline time.Time
}

// maxIdleReaders bounds the reader goroutines an instance keeps waiting.
const maxIdleReaders = 256

// startRead runs the read of s that read asked for; s.reading is set.
// The read runs on a kept goroutine (in.readers), which then usually
// polls the module itself with the result (kick): a fresh goroutine per
// read cost its start and exit, and the growth of its stack by copying
// on the way into wazero, each time.
func (in *Instance) startRead(s *socket, sock engine.Socket, max uint32, deadline time.Time) {
	in.receiving.Add(1)
	in.readers.Run(readJob{s: s, sock: sock, max: max, deadline: deadline})
}

// readOnce carries out a read that startRead handed over.
func (in *Instance) readOnce(j readJob) {
	defer in.receiving.Add(-1)
	bp := readBuffers.Get().(*[]byte)
	defer readBuffers.Put(bp)
	b := (*bp)[:min(int(j.max), len(*bp))]
	n, from, err := j.sock.Receive(b, j.deadline)
	s := j.s
	s.mu.Lock()
	s.reading = false
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	e := abi.Event{Kind: abi.EventRead, ID: s.fd, From: from, Data: b[:n]}
	if err != nil {
		e.Code, e.Data = classOf(err), nil
	}
	in.event(&e)
}

// instantiateSockets provides the "dohfwd" import module: the socket
// interface of package edge/abi over network. The imports run on the
// goroutine that polls, inside dohfwd_poll, and none of them waits.
func instantiateSockets(ctx context.Context, rt wazero.Runtime) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	b := rt.NewHostModuleBuilder(abi.ImportModule)
	other := uint64(engine.ErrOther)

	// sock_open(transport, addr, addr_len, src, src_len, deadline, fd_out) -> code
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in := instanceOf(ctx)
		mem := mod.Memory()
		addrText, ok1 := mem.Read(api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
		srcText, ok2 := mem.Read(api.DecodeU32(stack[3]), api.DecodeU32(stack[4]))
		if in == nil || !ok1 || !ok2 {
			stack[0] = other
			return
		}
		server, err := netip.ParseAddrPort(string(addrText))
		if err != nil {
			stack[0] = other
			return
		}
		var source netip.Addr
		if len(srcText) > 0 {
			if source, err = netip.ParseAddr(string(srcText)); err != nil {
				stack[0] = uint64(engine.ErrLocal)
				return
			}
		}
		t := engine.UDP
		if api.DecodeU32(stack[0]) == abi.TransportTCP {
			t = engine.TCP
		}
		fd, code := in.open(t, server, source, deadlineOf(stack[5]))
		if code != 0 {
			stack[0] = uint64(code)
			return
		}
		if !mem.WriteUint32Le(api.DecodeU32(stack[6]), fd) {
			in.close(fd)
			stack[0] = other
			return
		}
		stack[0] = 0
	}), []api.ValueType{i32, i32, i32, i32, i32, i64, i32}, []api.ValueType{i32}).Export(abi.ImportOpen)

	// sock_send(fd, buf, len) -> code
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in := instanceOf(ctx)
		data, ok := mod.Memory().Read(api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
		var s *socket
		if in != nil {
			s = in.socket(api.DecodeU32(stack[0]))
		}
		if s == nil || !ok {
			stack[0] = other
			return
		}
		s.mu.Lock()
		sock := s.sock
		if s.udp != nil {
			s.udp.sentSinceRead = true
		}
		if sock == nil && !s.closed {
			// Connecting: the connect's goroutine sends it.
			s.pending = append(s.pending, data...)
			s.mu.Unlock()
			stack[0] = 0
			return
		}
		s.mu.Unlock()
		if sock == nil {
			stack[0] = uint64(engine.ErrClosed)
			return
		}
		// A datagram, or a query on a fresh TCP connection: the kernel
		// takes it at once.
		if err := sock.Send(data); err != nil {
			stack[0] = uint64(classOf(err))
			return
		}
		stack[0] = 0
	}), []api.ValueType{i32, i32, i32}, []api.ValueType{i32}).Export(abi.ImportSend)

	// sock_recv(fd, max, deadline) -> code: the module waits on fd.
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in := instanceOf(ctx)
		var s *socket
		if in != nil {
			s = in.socket(api.DecodeU32(stack[0]))
		}
		if s == nil {
			stack[0] = other
			return
		}
		stack[0] = uint64(in.read(s, api.DecodeU32(stack[1]), deadlineOf(stack[2])))
	}), []api.ValueType{i32, i32, i64}, []api.ValueType{i32}).Export(abi.ImportRecv)

	// sock_close(fd) -> code
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in := instanceOf(ctx)
		if in == nil || !in.close(api.DecodeU32(stack[0])) {
			stack[0] = other
			return
		}
		stack[0] = 0
	}), []api.ValueType{i32}, []api.ValueType{i32}).Export(abi.ImportClose)

	_, err := b.Instantiate(ctx)
	return err
}

// close is sock_close.
func (in *Instance) close(fd uint32) bool {
	in.mu.Lock()
	s := in.sockets[fd]
	delete(in.sockets, fd)
	in.mu.Unlock()
	if s == nil {
		return false
	}
	s.close()
	return true
}
