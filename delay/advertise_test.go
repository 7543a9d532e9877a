package delay_test

import (
	"errors"
	"testing"

	"github.com/qmq-go/qmq/delay"
	"github.com/qmq-go/qmq/pkg/exposure"
)

// A delay server that registers with meta servers while bound to all interfaces
// needs --advertise-addr; without meta servers it registers nothing.
func TestOptions_WildcardListenerNeedsAdvertiseAddr(t *testing.T) {
	o := delay.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.Secure.Insecure = "0.0.0.0:20883", "", t.TempDir(), true
	o.Realtime = []string{"127.0.0.1:20881"}
	if err := o.Validate(); err != nil {
		t.Fatalf("fixed realtime brokers, no meta servers: %v", err)
	}
	o.Realtime, o.MetaServers = nil, []string{"127.0.0.1:20880"}
	if err := o.Validate(); !errors.Is(err, exposure.ErrNoAdvertiseAddr) {
		t.Fatalf("meta servers, no --advertise-addr: %v, want ErrNoAdvertiseAddr", err)
	}
	o.AdvertiseAddr = "0.0.0.0:20883"
	if err := o.Validate(); !errors.Is(err, exposure.ErrNoAdvertiseAddr) {
		t.Fatalf("a wildcard --advertise-addr: %v, want ErrNoAdvertiseAddr", err)
	}
	o.AdvertiseAddr = "10.0.0.12:20883"
	if err := o.Validate(); err != nil {
		t.Fatalf("with --advertise-addr: %v", err)
	}
}
