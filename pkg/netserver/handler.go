package netserver

import (
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Handler serves requests. Serve is called off the event loop, on the
// connection's serve goroutine, one request of a connection at a time and in
// arrival order; it must return quickly (hand slow work such as disk writes
// or long polls to other goroutines, which reply later with r.Reply).
type Handler interface {
	Serve(r *Request)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(r *Request)

// Serve calls f(r).
func (f HandlerFunc) Serve(r *Request) { f(r) }

// Ping answers a CmdPing request: StatusOK with the request's body.
func Ping(r *Request) { r.Reply(protocol.StatusOK, r.Body) }

// Mux dispatches requests to a Handler per command. A new Mux answers
// CmdPing with Ping; commands without a handler are answered with
// StatusUnknownCommand and the connection stays open. Register handlers
// before the server starts; a Mux is read-only while it serves.
type Mux struct {
	handlers []Handler // indexed by command
}

// NewMux returns a Mux that answers CmdPing.
func NewMux() *Mux {
	m := &Mux{}
	m.HandleFunc(protocol.CmdPing, Ping)
	return m
}

// Handle serves cmd with h, replacing any earlier handler (h nil removes it).
func (m *Mux) Handle(cmd protocol.Command, h Handler) {
	for int(cmd) >= len(m.handlers) {
		m.handlers = append(m.handlers, nil)
	}
	m.handlers[cmd] = h
}

// HandleFunc serves cmd with f.
func (m *Mux) HandleFunc(cmd protocol.Command, f func(r *Request)) { m.Handle(cmd, HandlerFunc(f)) }

// Serve dispatches r by its command.
func (m *Mux) Serve(r *Request) {
	if cmd := int(r.Header.Code); cmd < len(m.handlers) && m.handlers[cmd] != nil {
		m.handlers[cmd].Serve(r)
		return
	}
	r.ReplyError(protocol.Errorf(protocol.StatusUnknownCommand, r.Command().String()))
}
