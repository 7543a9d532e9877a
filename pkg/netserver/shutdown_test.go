package netserver

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// Clients that redial at once while the server closes (as a transport does
// when its connection drops) are never left on a connection that is open
// but that nobody serves: each connection either gets its pings answered or
// is closed or refused. (With gnet's Engine.Stop, the acceptor could hand a
// connection to an event loop that had already exited: it was neither
// served nor closed, and its client waited forever.)
func TestServer_CloseLeavesNoConnectionUnserved(t *testing.T) {
	const zombieAfter = time.Second // no answer and no close for this long
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	for round := range rounds {
		s := startServer(t, Options{EventLoops: 1 + round%2}, NewMux())
		addr := s.Addr().String()
		var (
			stop    atomic.Bool
			zombies atomic.Int32
			dialled atomic.Int32
			wg      sync.WaitGroup
		)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hb := make([]byte, protocol.HeaderSize)
				for !stop.Load() {
					nc, err := net.DialTimeout("tcp", addr, time.Second)
					if err != nil {
						time.Sleep(time.Millisecond) // refused: the server is gone
						continue
					}
					dialled.Add(1)
					for !stop.Load() {
						if _, err := nc.Write(protocol.AppendRequest(nil, protocol.CmdPing, 1, nil)); err != nil {
							break
						}
						_ = nc.SetReadDeadline(time.Now().Add(zombieAfter))
						_, err := io.ReadFull(nc, hb)
						var ne net.Error
						if errors.As(err, &ne) && ne.Timeout() {
							zombies.Add(1)
							break
						}
						if err != nil {
							break // closed or reset: redial at once
						}
					}
					nc.Close()
				}
			}()
		}
		waitFor(t, 5*time.Second, "clients connected", func() bool { return dialled.Load() >= 8 })
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := s.logs.FilterMessage("stopping gnet without shutting its listener down first").Len(); n > 0 {
			t.Fatal("gnet did not stop when its listener was shut down")
		}
		if n := s.logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n > 0 {
			t.Fatalf("Close logged %d errors: %v", n, s.logs.FilterLevelExact(zapcore.ErrorLevel).All())
		}
		time.Sleep(zombieAfter + 200*time.Millisecond) // a zombie's read times out
		stop.Store(true)
		wg.Wait()
		if n := zombies.Load(); n > 0 {
			t.Fatalf("%d connections were accepted but neither served nor closed", n)
		}
	}
}
