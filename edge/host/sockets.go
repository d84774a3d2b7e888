package host

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/dohfwd/dohfwd/edge/abi"
	"github.com/dohfwd/dohfwd/engine"
)

// sockets is one instance's table of open sockets; the fd the module sees
// is an index into it plus one. Only the instance's own call touches it.
type sockets struct {
	open []engine.Socket
}

func (s *sockets) add(sock engine.Socket) uint32 {
	for i, x := range s.open {
		if x == nil {
			s.open[i] = sock
			return uint32(i + 1)
		}
	}
	s.open = append(s.open, sock)
	return uint32(len(s.open))
}

func (s *sockets) get(fd uint32) engine.Socket {
	if fd == 0 || int(fd) > len(s.open) {
		return nil
	}
	return s.open[fd-1]
}

func (s *sockets) remove(fd uint32) engine.Socket {
	sock := s.get(fd)
	if sock != nil {
		s.open[fd-1] = nil
	}
	return sock
}

// closeAll closes what a call left open (a module that trapped midway).
func (s *sockets) closeAll() {
	for i, x := range s.open {
		if x != nil {
			x.Close()
			s.open[i] = nil
		}
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

// errCancelled is abi.Cancelled inside the host: the request a socket
// import serves is done.
var errCancelled = errors.New("edge: request cancelled")

// classOf is the code an import returns for err: abi.Cancelled, or its
// engine.ErrorClass.
func classOf(err error) uint64 {
	if err == errCancelled {
		return abi.Cancelled
	}
	var se *engine.SocketError
	if errors.As(err, &se) && se.Class != 0 {
		return uint64(se.Class)
	}
	return uint64(engine.ErrOther)
}

// done reports whether the request the instance's running call serves
// is over; req is nil outside a Serve call.
func done(req context.Context) bool { return req != nil && req.Err() != nil }

// open is network.Open that gives up when req is done. A TCP connect may
// wait until its deadline, so it runs aside and whoever does not take the
// socket closes it; a UDP open does not wait.
func open(req context.Context, network engine.Network, t engine.Transport, server netip.AddrPort, source netip.Addr, deadline time.Time) (engine.Socket, error) {
	if done(req) {
		return nil, errCancelled
	}
	if req == nil || req.Done() == nil || t == engine.UDP {
		return network.Open(t, server, source, deadline)
	}
	type opened struct {
		sock engine.Socket
		err  error
	}
	handoff := make(chan opened) // unbuffered: the socket has one owner
	go func() {
		sock, err := network.Open(t, server, source, deadline)
		select {
		case handoff <- opened{sock, err}:
		case <-req.Done():
			if sock != nil {
				sock.Close()
			}
		}
	}()
	select {
	case o := <-handoff:
		return o.sock, o.err
	case <-req.Done():
		return nil, errCancelled
	}
}

// receive is sock.Receive that also ends when req is done: the socket is
// closed under it, as the native engine closes a transaction's socket
// when its client goes.
func receive(req context.Context, sock engine.Socket, b []byte, deadline time.Time) (int, netip.AddrPort, error) {
	if done(req) {
		return 0, netip.AddrPort{}, errCancelled
	}
	if req == nil || req.Done() == nil {
		return sock.Receive(b, deadline)
	}
	stop := context.AfterFunc(req, func() { sock.Close() })
	n, from, err := sock.Receive(b, deadline)
	stop()
	if err != nil && done(req) {
		err = errCancelled
	}
	return n, from, err
}

func deadlineOf(ns uint64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(ns))
}

// instantiateSockets provides the "dohfwd" import module: the socket
// interface of package edge/abi over network.
func instantiateSockets(ctx context.Context, rt wazero.Runtime, network engine.Network) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	b := rt.NewHostModuleBuilder(abi.ImportModule)

	// Each import returns 0, an engine.ErrorClass, or abi.Cancelled once
	// the request the call serves is done.

	// sock_open(transport, addr, addr_len, src, src_len, deadline, fd_out) -> class
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in := instanceOf(ctx)
		mem := mod.Memory()
		addrText, ok1 := mem.Read(api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
		srcText, ok2 := mem.Read(api.DecodeU32(stack[3]), api.DecodeU32(stack[4]))
		if in == nil || !ok1 || !ok2 {
			stack[0] = uint64(engine.ErrOther)
			return
		}
		server, err := netip.ParseAddrPort(string(addrText))
		if err != nil {
			stack[0] = uint64(engine.ErrOther)
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
		sock, err := open(in.request, network, t, server, source, deadlineOf(stack[5]))
		if err != nil {
			stack[0] = classOf(err)
			return
		}
		if !mem.WriteUint32Le(api.DecodeU32(stack[6]), in.sockets.add(sock)) {
			sock.Close()
			stack[0] = uint64(engine.ErrOther)
			return
		}
		stack[0] = 0
	}), []api.ValueType{i32, i32, i32, i32, i32, i64, i32}, []api.ValueType{i32}).Export(abi.ImportOpen)

	// sock_send(fd, buf, len) -> class
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in := instanceOf(ctx)
		data, ok := mod.Memory().Read(api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
		var sock engine.Socket
		if in != nil {
			sock = in.sockets.get(api.DecodeU32(stack[0]))
		}
		if sock == nil || !ok {
			stack[0] = uint64(engine.ErrOther)
			return
		}
		if done(in.request) {
			stack[0] = abi.Cancelled
			return
		}
		if err := sock.Send(data); err != nil {
			stack[0] = classOf(err)
			return
		}
		stack[0] = 0
	}), []api.ValueType{i32, i32, i32}, []api.ValueType{i32}).Export(abi.ImportSend)

	// sock_recv(fd, buf, len, deadline, info) -> class; info is
	// abi.RecvInfoSize bytes: n, port, padding, 16-byte address.
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in := instanceOf(ctx)
		mem := mod.Memory()
		data, ok1 := mem.Read(api.DecodeU32(stack[1]), api.DecodeU32(stack[2]))
		info, ok2 := mem.Read(api.DecodeU32(stack[4]), abi.RecvInfoSize)
		var sock engine.Socket
		if in != nil {
			sock = in.sockets.get(api.DecodeU32(stack[0]))
		}
		if sock == nil || !ok1 || !ok2 {
			stack[0] = uint64(engine.ErrOther)
			return
		}
		// The module is blocked in this call, so reading straight into
		// its memory is safe.
		in.receiving.Add(1)
		n, from, err := receive(in.request, sock, data, deadlineOf(stack[3]))
		in.receiving.Add(-1)
		if err != nil {
			stack[0] = classOf(err)
			return
		}
		binary.LittleEndian.PutUint32(info[0:], uint32(n))
		binary.LittleEndian.PutUint16(info[4:], from.Port())
		binary.LittleEndian.PutUint16(info[6:], 0)
		a16 := from.Addr().As16()
		copy(info[8:24], a16[:])
		stack[0] = 0
	}), []api.ValueType{i32, i32, i32, i64, i32}, []api.ValueType{i32}).Export(abi.ImportRecv)

	// sock_close(fd) -> class
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		in := instanceOf(ctx)
		var sock engine.Socket
		if in != nil {
			sock = in.sockets.remove(api.DecodeU32(stack[0]))
		}
		if sock == nil {
			stack[0] = uint64(engine.ErrOther)
			return
		}
		sock.Close()
		stack[0] = 0
	}), []api.ValueType{i32}, []api.ValueType{i32}).Export(abi.ImportClose)

	_, err := b.Instantiate(ctx)
	return err
}
