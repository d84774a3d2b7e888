// Package dnstap writes dohfwd's DNS messages to a dnstap collector
// (https://dnstap.info): each is a dnstap.Dnstap protobuf message, sent
// as one Frame Streams frame of content type "protobuf:dnstap.Dnstap" on a
// Unix or TCP socket. The messages come from the front ends (CLIENT_QUERY,
// CLIENT_RESPONSE) and the engine (FORWARDER_QUERY, FORWARDER_RESPONSE)
// through engine/wiretap, which Writer implements.
//
// It lives inside the server (doh/internal), beside the listeners it
// serves: only doh/assembly's native side builds one, so neither the
// engine nor the WebAssembly module links Frame Streams or protobuf; the
// engine and the front ends know only the wiretap interface.
//
// A question never waits for it: Tap copies the message into a bounded
// queue and returns, dropping it (and counting the drop) when the queue
// is full, as it is while the collector is away. One goroutine encodes
// and writes, and reconnects with backoff.
package dnstap
