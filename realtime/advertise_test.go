package realtime_test

import (
	"errors"
	"testing"

	"github.com/qmq-go/qmq/pkg/exposure"
	"github.com/qmq-go/qmq/realtime"
)

// A broker that registers with meta servers while bound to all interfaces
// needs --advertise-addr; without meta servers it registers nothing.
func TestOptions_WildcardListenerNeedsAdvertiseAddr(t *testing.T) {
	o := realtime.NewOptions()
	o.Addr, o.HTTPAddr, o.DataDir, o.Secure.Insecure = "0.0.0.0:20881", "", t.TempDir(), true
	if err := o.Validate(); err != nil {
		t.Fatalf("no meta servers: %v", err)
	}
	o.MetaServers = []string{"127.0.0.1:20880"}
	if err := o.Validate(); !errors.Is(err, exposure.ErrNoAdvertiseAddr) {
		t.Fatalf("meta servers, no --advertise-addr: %v, want ErrNoAdvertiseAddr", err)
	}
	o.AdvertiseAddr = "0.0.0.0:20881"
	if err := o.Validate(); !errors.Is(err, exposure.ErrNoAdvertiseAddr) {
		t.Fatalf("a wildcard --advertise-addr: %v, want ErrNoAdvertiseAddr", err)
	}
	o.AdvertiseAddr = "10.0.0.12:20881"
	if err := o.Validate(); err != nil {
		t.Fatalf("with --advertise-addr: %v", err)
	}
}
