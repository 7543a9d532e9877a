package transport_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/qmq-go/qmq/pkg/netserver"
	"github.com/qmq-go/qmq/pkg/protocol"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
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

// A client of a cluster that requires TLS and an identity: the CA file
// verifies the servers (and is re-read when it changes), and the identity's
// credentials come from $QMQ_CREDENTIALS ("name:secret") — or from a file
// with transport.CredentialsFromFile.
func ExampleOptions_secure() {
	tlsCfg, err := tlsconfig.Client(tlsconfig.Files{CA: "data/tls/ca.pem"}, "")
	if err != nil {
		fmt.Println("TLS:", err)
		return
	}
	creds, err := transport.CredentialsFromEnv()
	if err != nil {
		fmt.Println("credentials:", err)
		return
	}
	client, err := transport.New(transport.Options{TLS: tlsCfg, Credentials: creds}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	_, err = client.Call(context.Background(), "127.0.0.1:20881", protocol.CmdPing, nil)
	if errors.Is(err, protocol.ErrUnauthenticated) {
		fmt.Println("the server does not know these credentials:", err)
	}
}
