package devetcd

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/qmq-go/qmq/pkg/exposure"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// freePort returns a port free on all interfaces a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestOptions_WildcardNeedsAdvertise(t *testing.T) {
	dir := t.TempDir()
	for _, o := range []Options{
		{Dir: dir, ClientAddr: "0.0.0.0:2379"},
		{Dir: dir, PeerAddr: "[::]:2380"},
		{Dir: dir, ClientAddr: "0.0.0.0:2379", ClientAdvertise: "0.0.0.0:2379"},
	} {
		if err := o.Validate(); !errors.Is(err, exposure.ErrNoAdvertiseAddr) {
			t.Errorf("Validate(%+v) = %v, want ErrNoAdvertiseAddr", o, err)
		}
	}
	ok := Options{Dir: dir, ClientAddr: "0.0.0.0:2379", ClientAdvertise: "10.0.0.5:2379", PeerAddr: "0.0.0.0:2380", PeerAdvertise: "10.0.0.5:2380"}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
}

// A member listening on all interfaces advertises the address it was
// given, and Endpoints returns it.
func TestStart_ListensOnAllInterfacesAdvertisesOne(t *testing.T) {
	var e *Etcd
	var err error
	var advertise string
	for try := 0; try < 3; try++ { // a free port may be taken before etcd binds it
		cp, pp := freePort(t), freePort(t)
		advertise = "127.0.0.1:" + strconv.Itoa(cp)
		e, err = Start(Options{Dir: t.TempDir(), Fast: true,
			ClientAddr: "0.0.0.0:" + strconv.Itoa(cp), ClientAdvertise: advertise,
			PeerAddr: "0.0.0.0:" + strconv.Itoa(pp), PeerAdvertise: "127.0.0.1:" + strconv.Itoa(pp)}, nil)
		if err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got := e.Endpoints(); len(got) != 1 || got[0] != advertise {
		t.Fatalf("Endpoints() = %v, want [%s]", got, advertise)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Members) != 1 || len(members.Members[0].ClientURLs) != 1 || members.Members[0].ClientURLs[0] != "http://"+advertise {
		t.Fatalf("members advertise %v, want http://%s", members.Members, advertise)
	}
}
