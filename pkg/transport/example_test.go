package transport_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/transport"
)

// Keeping many requests in flight on one connection with Go, without a
// goroutine per request.
func ExampleClient_Go() {
	srv, err := netserver.New(netserver.Options{}, netserver.NewMux(), nil)
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

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		bytes int
	)
	for i := range 100 {
		wg.Add(1)
		err := client.Go(srv.Addr().String(), protocol.CmdPing, fmt.Appendf(nil, "batch-%03d", i), 0,
			func(body []byte, err error) {
				defer wg.Done()
				if err == nil {
					mu.Lock()
					bytes += len(body)
					mu.Unlock()
				}
			})
		if err != nil { // not sent; the callback will not run
			wg.Done()
		}
	}
	wg.Wait()
	fmt.Println(bytes, "bytes echoed")
	// Output: 900 bytes echoed
}
