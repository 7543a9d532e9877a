package metaserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/qmq-go/qmq/pkg/protocol"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// store is the meta server's side of etcd: the watch that feeds the view,
// and the writes. Every write goes to etcd; the view learns of it through
// the watch (or applyRoute for a route this server just assigned).
type store struct {
	cli     *clientv3.Client
	k       keys
	v       *view
	timeout time.Duration
	lg      *zap.Logger

	watching atomic.Bool // the watch is established
	etcdOK   atomic.Bool // the last probe of etcd succeeded
}

// probeLoop asks etcd for a count every interval and records whether it
// answered: a watch whose server vanished keeps retrying quietly, so this
// is how the server learns that etcd is down (for /readyz and metrics).
func (s *store) probeLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pctx, cancel := s.ctx(ctx)
		_, err := s.cli.Get(pctx, s.k.prefix+"probe", clientv3.WithCountOnly())
		cancel()
		if ctx.Err() != nil {
			return
		}
		if was := s.etcdOK.Swap(err == nil); was != (err == nil) {
			if err != nil {
				s.lg.Warn("etcd unreachable; serving lookups from the last view", zap.Error(err))
			} else {
				s.lg.Info("etcd reachable")
			}
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// errEtcd wraps etcd failures so callers can answer "unavailable".
var errEtcd = errors.New("etcd")

func etcdErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", errEtcd, op, err)
}

// ctx returns a context bounded by the etcd timeout.
func (s *store) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, s.timeout)
}

// load reads everything under the prefix into the view and returns the
// revision of the read.
func (s *store) load(ctx context.Context) (int64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.k.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, etcdErr("load", err)
	}
	kvs := make([]kv, 0, len(resp.Kvs))
	for _, e := range resp.Kvs {
		kvs = append(kvs, kv{key: string(e.Key), value: e.Value, modRev: e.ModRevision})
	}
	s.v.reset(kvs, resp.Header.Revision)
	return resp.Header.Revision, nil
}

// watchLoop keeps the view current until ctx ends: read everything, watch
// from the revision after the read, and start over (keeping the old view
// meanwhile) when the watch breaks or is compacted away.
func (s *store) watchLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		rev, err := s.load(ctx)
		if err != nil {
			s.watching.Store(false)
			s.lg.Warn("cannot read etcd; serving the last view", zap.Error(err), zap.Duration("retry", backoff))
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		s.watching.Store(true)
		s.etcdOK.Store(true)
		s.watch(ctx, rev)
		s.watching.Store(false)
	}
}

// watch applies changes after rev until the watch ends.
func (s *store) watch(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.cli.Watch(wctx, s.k.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			s.lg.Warn("etcd watch ended; reloading", zap.Error(err))
			return
		}
		changes := make([]kv, 0, len(resp.Events))
		for _, ev := range resp.Events {
			e := kv{key: string(ev.Kv.Key), modRev: ev.Kv.ModRevision}
			if ev.Type == clientv3.EventTypePut {
				e.value = ev.Kv.Value
				if e.value == nil {
					e.value = []byte{}
				}
			}
			changes = append(changes, e)
		}
		s.v.apply(changes, resp.Header.Revision)
	}
	if ctx.Err() == nil {
		s.lg.Warn("etcd watch closed; reloading")
	}
}

// putJSON writes key = JSON(v), on lease when lease != 0, and returns the
// revision of the write.
func (s *store) putJSON(ctx context.Context, key string, v any, lease clientv3.LeaseID) (int64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	resp, err := s.cli.Put(ctx, key, string(b), opts...)
	if err != nil {
		return 0, etcdErr("put "+key, err)
	}
	return resp.Header.Revision, nil
}

// delete removes key and returns the revision of the delete.
func (s *store) delete(ctx context.Context, key string) (int64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Delete(ctx, key)
	if err != nil {
		return 0, etcdErr("delete "+key, err)
	}
	return resp.Header.Revision, nil
}

// getRoute reads a route from etcd (not the view) with its mod revision; 0
// when it does not exist.
func (s *store) getRoute(ctx context.Context, kind protocol.BrokerKind, subject string) (routeRecord, int64, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.k.route(kind, subject))
	if err != nil {
		return routeRecord{}, 0, etcdErr("get route", err)
	}
	if len(resp.Kvs) == 0 {
		return routeRecord{}, 0, nil
	}
	var r routeRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return routeRecord{}, 0, fmt.Errorf("route %s: %w", subject, err)
	}
	return r, resp.Kvs[0].ModRevision, nil
}

// casRoute writes a route if it is still at modRev (0: does not exist yet).
// It returns whether it wrote and the revision of the write.
func (s *store) casRoute(ctx context.Context, kind protocol.BrokerKind, subject string, r routeRecord, modRev int64) (bool, int64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return false, 0, err
	}
	key := s.k.route(kind, subject)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	cmp := clientv3.Compare(clientv3.ModRevision(key), "=", modRev)
	if modRev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	resp, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return false, 0, etcdErr("route txn", err)
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

// createRoute writes r unless the subject already has a route, and returns
// the route that stands with its mod revision: r when this call created it,
// the existing one otherwise. Concurrent meta servers agree because only one
// create can succeed.
func (s *store) createRoute(ctx context.Context, kind protocol.BrokerKind, subject string, r routeRecord) (routeRecord, int64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return routeRecord{}, 0, err
	}
	key := s.k.route(kind, subject)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return routeRecord{}, 0, etcdErr("route txn", err)
	}
	if resp.Succeeded {
		return r, resp.Header.Revision, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return routeRecord{}, 0, fmt.Errorf("%w: route %s vanished during its creation", errEtcd, subject)
	}
	var cur routeRecord
	if err := json.Unmarshal(kvs[0].Value, &cur); err != nil {
		return routeRecord{}, 0, fmt.Errorf("route %s: %w", subject, err)
	}
	return cur, kvs[0].ModRevision, nil
}
