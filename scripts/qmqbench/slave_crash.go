package main

// The slave-crash suite: what a SIGKILL of a realtime slave costs
// synchronous producers when its master runs --wait-slave.
//
// Servers: a meta server with an embedded etcd (child process, default
// broker lease TTL), and one broker group "sc" of two qmq-realtime
// processes registered with it: the master with --wait-slave and the
// default --slave-down alone (durable flush: every ack waits for the
// master's fsync and the slave's copy and fsync), the slave with --role
// slave --wait-slave.
//
// Clients (this process): 16 producers (pkg/producer, each its own
// connection, routes through one pkg/metaclient), each sending one 256-byte
// message at a time and waiting for its acknowledgement before the next (no
// pipelining, no batching; send timeout 10 s). After two seconds of load
// the slave is SIGKILLed; the suite polls the master's /metrics every 10 ms
// until its write state shows the policy applied (qmq_failover_write_state
// 2, alone, with the slave removed from the eligible set), keeps the load
// three more seconds, restarts the slave on its directory, waits until the
// master counts on it again, and repeats (-slave-crash-kills times).
//
// With -slave-crash-policy readonly both brokers run --slave-down readonly,
// the policy applied is state 3 (readonly), and a second group sc2 (a
// master alone) shares the subject's route, so the writes the readonly
// group refuses go there: the stall is how long producers take to move.
// With -slave-crash-kind delay the groups are qmq-delay servers (same flags)
// and every message is delayed by 2 s, forwarded when due to a realtime
// group sc-rt (a master alone).
//
//	slave_crash_max_stall_ms       the longest time any producer waited
//	                               between two acknowledgements from one
//	                               second before a kill to three after, worst
//	                               kill (target ≤ 500)
//	slave_crash_baseline_stall_ms  the same over the two seconds before each
//	                               kill (the machine's noise), worst kill
//	slave_crash_policy_ms          SIGKILL to the master's state alone (or
//	                               readonly), worst kill (the issue: within
//	                               500 ms)
//	slave_crash_failed_sends       sends that returned an error (target 0)

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/qmq-go/qmq/metaserver"
	"github.com/qmq-go/qmq/pkg/metaclient"
	"github.com/qmq-go/qmq/producer"
)

var (
	slaveCrashKills  = flag.Int("slave-crash-kills", 3, "slave-crash: how many times the slave is SIGKILLed")
	slaveCrashKind   = flag.String("slave-crash-kind", "realtime", "slave-crash: the replicated group's servers: realtime, or delay (qmq-delay; every message delayed by 2 s, forwarded to a realtime group sc-rt)")
	slaveCrashPolicy = flag.String("slave-crash-policy", "alone", "slave-crash: the master's --slave-down policy (alone, or readonly: a second group sc2, a master alone, takes the writes the readonly group refuses)")
)

const (
	scGroup     = "sc"
	scSubject   = "bench.slavecrash"
	scProducers = 16
)

func init() {
	register("slave-crash", runSlaveCrash)
}

func runSlaveCrash(env *Env) error {
	addrs, stopMeta, err := startMetaServer(filepath.Join(env.Dir, "sc-meta"), metaFakesEnv+"=0",
		metaTTLEnv+"="+metaserver.NewOptions().BrokerTTL.String())
	if err != nil {
		return err
	}
	defer stopMeta()
	meta, _, _ := strings.Cut(addrs, " ")
	var wantState float64
	switch *slaveCrashPolicy {
	case "alone":
		wantState = 2
	case "readonly":
		wantState = 3
	default:
		return fmt.Errorf("-slave-crash-policy %q: want alone or readonly", *slaveCrashPolicy)
	}
	master := newGroupNode(env, "sc-master", scGroup, "--wait-slave", "--slave-down", *slaveCrashPolicy)
	slave := newGroupNode(env, "sc-slave", scGroup, "--role", "slave", "--wait-slave", "--slave-down", *slaveCrashPolicy)
	other := newGroupNode(env, "sc2-master", "sc2")
	target := newGroupNode(env, "sc-rt-master", "sc-rt")
	delayed := 0
	switch *slaveCrashKind {
	case "realtime":
	case "delay":
		master.kind, slave.kind, other.kind = "delay", "delay", "delay"
		delayed = scProducers
		if err := env.startNode(target, []string{meta}); err != nil {
			return err
		}
		if err := waitWritableAlone(target, 30*time.Second); err != nil {
			return err
		}
	default:
		return fmt.Errorf("-slave-crash-kind %q: want realtime or delay", *slaveCrashKind)
	}
	defer func() {
		for _, n := range []*groupNode{master, slave, other, target} {
			if n.p != nil {
				n.p.stop()
			}
		}
	}()
	if err := env.startNode(master, []string{meta}); err != nil {
		return err
	}
	if err := waitWritableAlone(master, 30*time.Second); err != nil {
		return err
	}
	if wantState == 3 {
		if err := env.startNode(other, []string{meta}); err != nil {
			return err
		}
		if err := waitWritableAlone(other, 30*time.Second); err != nil {
			return err
		}
	}
	if err := env.startNode(slave, []string{meta}); err != nil {
		return err
	}
	if err := waitRoles(master, slave, 60*time.Second); err != nil {
		return err
	}

	mc, err := metaclient.New([]string{meta}, "bench-slave-crash", metaclient.WithRefreshInterval(time.Second))
	if err != nil {
		return err
	}
	defer mc.Close()
	ps := make([]*producer.Producer, scProducers)
	for i := range ps {
		if ps[i], err = producer.New(producer.WithResolver(mc), producer.WithSendTimeout(10*time.Second)); err != nil {
			return err
		}
		defer ps[i].Close(context.Background())
	}
	load := startSenders(ps, scSubject, 256, 10*time.Second, delayed, 2*time.Second)
	defer load.halt()

	var worstStall, worstBase, worstPolicy time.Duration
	for kill := 1; kill <= *slaveCrashKills; kill++ {
		time.Sleep(2 * time.Second)
		killed := time.Now()
		base := load.maxGap(killed.Add(-2*time.Second), killed)
		slave.p.kill()
		slave.p = nil
		var policy time.Duration
		if err := pollFor(30*time.Second, 10*time.Millisecond, fmt.Sprintf("kill %d: the master applies its policy", kill), func() error {
			m, err := master.metrics()
			if err != nil {
				return err
			}
			if m["qmq_failover_write_state"] != wantState || wantState == 2 && m["qmq_failover_eligible_slave"] != 0 {
				return fmt.Errorf("write state %v, eligible slave %v", m["qmq_failover_write_state"], m["qmq_failover_eligible_slave"])
			}
			policy = time.Since(killed)
			return nil
		}); err != nil {
			return err
		}
		time.Sleep(time.Until(killed.Add(3 * time.Second)))
		stall := load.maxGap(killed.Add(-time.Second), killed.Add(3*time.Second))
		m, err := master.metrics()
		if err != nil {
			return err
		}
		shrunk := m[`qmq_failover_write_state_changes_total{group="sc",kind="`+master.kind+`",reason="set-shrunk",state="alone"}`] +
			m[`qmq_failover_write_state_changes_total{group="sc",kind="`+master.kind+`",reason="slave-gone",state="readonly"}`]
		acked, failed := load.total()
		env.Logf("kill %d: policy applied after %v (state %v, set-shrunk or slave-gone changes %v), longest wait for an ack %v (before the kill %v); %d acked, %d failed so far",
			kill, policy.Round(time.Millisecond), wantState, shrunk, stall.Round(time.Millisecond), base.Round(time.Millisecond), acked, failed)
		worstStall, worstBase, worstPolicy = max(worstStall, stall), max(worstBase, base), max(worstPolicy, policy)
		if err := env.startNode(slave, []string{meta}); err != nil {
			return fmt.Errorf("kill %d: restart the slave: %w", kill, err)
		}
		if err := waitRoles(master, slave, 60*time.Second); err != nil {
			return fmt.Errorf("kill %d: %w", kill, err)
		}
	}
	load.halt()
	_, failed := load.total()
	if failed > 0 {
		env.Logf("failed sends:%s", load.errorSummary())
	}
	env.Metric("slave_crash_max_stall_ms", float64(worstStall.Milliseconds()), "ms")
	env.Metric("slave_crash_baseline_stall_ms", float64(worstBase.Milliseconds()), "ms")
	env.Metric("slave_crash_policy_ms", float64(worstPolicy.Milliseconds()), "ms")
	env.Metric("slave_crash_failed_sends", float64(failed), "sends")
	return nil
}
