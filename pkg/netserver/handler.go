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

// InlineHandler is a Handler that serves some commands on the event loop
// itself, which saves two goroutine hand-offs per read. For the commands
// Inline reports, Serve is called on the event loop, so it must not block
// at all, must reply before it returns, and must not keep r or r.Body (the
// body points into gnet's read buffer); Reply copies, so replying with
// r.Body is fine. A request it leaves unanswered gets StatusInternal.
// Other commands are served off the loop as usual.
type InlineHandler interface {
	Handler
	// Inline reports whether cmd is served on the event loop. It is called
	// on the loop for every request and must be cheap.
	Inline(cmd protocol.Command) bool
}

// Ping answers a CmdPing request: StatusOK with the request's body. It
// never blocks, so it may be served inline.
func Ping(r *Request) { r.Reply(protocol.StatusOK, r.Body) }

// Mux dispatches requests to a Handler per command. A new Mux answers
// CmdPing with Ping on the event loop; commands without a handler are
// answered with StatusUnknownCommand and the connection stays open.
// Register handlers before the server starts; a Mux is read-only while it
// serves. Mux is an InlineHandler: commands registered with HandleInline are
// served on the event loop.
type Mux struct {
	handlers []Handler // indexed by command
	inline   []bool    // indexed by command
}

// NewMux returns a Mux that answers CmdPing on the event loop.
func NewMux() *Mux {
	m := &Mux{}
	m.HandleInline(protocol.CmdPing, HandlerFunc(Ping))
	return m
}

// Handle serves cmd with h off the event loop, replacing any earlier
// handler (h nil removes it).
func (m *Mux) Handle(cmd protocol.Command, h Handler) { m.set(cmd, h, false) }

// HandleFunc serves cmd with f off the event loop.
func (m *Mux) HandleFunc(cmd protocol.Command, f func(r *Request)) { m.Handle(cmd, HandlerFunc(f)) }

// HandleInline serves cmd with h on the event loop; h must follow the rules
// of InlineHandler.
func (m *Mux) HandleInline(cmd protocol.Command, h Handler) { m.set(cmd, h, h != nil) }

func (m *Mux) set(cmd protocol.Command, h Handler, inline bool) {
	for int(cmd) >= len(m.handlers) {
		m.handlers = append(m.handlers, nil)
		m.inline = append(m.inline, false)
	}
	m.handlers[cmd] = h
	m.inline[cmd] = inline
}

// Inline reports whether cmd was registered with HandleInline.
func (m *Mux) Inline(cmd protocol.Command) bool {
	return int(cmd) < len(m.inline) && m.inline[cmd]
}

// Serve dispatches r by its command.
func (m *Mux) Serve(r *Request) {
	if cmd := int(r.Header.Code); cmd < len(m.handlers) && m.handlers[cmd] != nil {
		m.handlers[cmd].Serve(r)
		return
	}
	r.ReplyError(protocol.Errorf(protocol.StatusUnknownCommand, r.Command().String()))
}
