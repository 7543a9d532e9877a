package netserver_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
)

// A server with one off-loop handler that replies later, and a client.
func Example() {
	mux := netserver.NewMux() // answers CmdPing on the event loop
	mux.HandleFunc(protocol.CmdLookup, func(r *netserver.Request) {
		if len(r.Body) == 0 {
			r.ReplyError(protocol.Errorf(protocol.StatusBadRequest, "empty subject"))
			return
		}
		go func() { // slow work never runs in Serve itself
			time.Sleep(time.Millisecond)
			r.Reply(protocol.StatusOK, []byte("route for "), r.Body)
		}()
	})
	srv, err := netserver.New(netserver.Options{Addr: "127.0.0.1:0"}, mux, nil)
	if err != nil {
		panic(err)
	}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close(context.Background())

	client, err := transport.New(transport.Options{}, nil)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	body, err := client.Call(ctx, srv.Addr().String(), protocol.CmdLookup, []byte("orders"))
	fmt.Println(string(body), err)
	_, err = client.Call(ctx, srv.Addr().String(), protocol.CmdLookup, nil)
	fmt.Println(errors.Is(err, protocol.ErrBadRequest), err)
	// Output:
	// route for orders <nil>
	// true qmq: bad request: empty subject
}
