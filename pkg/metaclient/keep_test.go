package metaclient

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
)

// TestKeep_RegistersOnceAMetaServerAppears starts a Keeper while no meta
// server listens, then starts one: the broker registers, heartbeats, and
// leaves on Close.
func TestKeep_RegistersOnceAMetaServerAppears(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	k := Keep([]string{addr}, Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: "g1", Address: "127.0.0.1:5000"},
		nil, WithRequestTimeout(200*time.Millisecond))
	time.Sleep(300 * time.Millisecond) // a few failed attempts
	if k.Registered() || k.Registration() != nil {
		t.Fatal("registered with no meta server")
	}
	m := startFakeMetaAt(t, addr)
	eventually(t, 10*time.Second, "the keeper to register", k.Registered)
	eventually(t, 3*time.Second, "heartbeats", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.registers) >= 3
	})
	if err := k.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	last := m.registers[len(m.registers)-1]
	m.mu.Unlock()
	if last.Flags&protocol.RegisterLeaving == 0 {
		t.Fatalf("Close sent %+v, want leaving", last)
	}
}

func TestKeep_CloseBeforeRegistering(t *testing.T) {
	k := Keep([]string{"127.0.0.1:1"}, Broker{Kind: protocol.KindRealtime, Role: protocol.RoleMaster, Group: "g1", Address: "127.0.0.1:5000"},
		nil, WithRequestTimeout(100*time.Millisecond))
	done := make(chan error, 1)
	go func() { done <- k.Close(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung while the keeper was retrying")
	}
}
