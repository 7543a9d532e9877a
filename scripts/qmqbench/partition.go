package main

// The partition suite (scripts/netlab/partition): each server in its own
// network namespace with its own address — a meta server with its embedded
// etcd, a realtime group (master and slave, --wait-slave), a delay group
// (master and slave, --wait-slave) — and the client in another: 4
// synchronous senders of realtime messages and 2 of messages due 2 s later
// (one message per send, unique ids, through the meta server's routes), one
// consumer of the subject (4 handlers, acking each message), and a direct
// probe send to each broker every 25 ms. Servers run with their default
// flush (fsync before the ack, group commit). Six cuts, 6 s each, then a
// heal: the masters from the meta server and etcd (the client and slaves
// still reach them); each master from its slave; the client from the meta
// server; each master from both its slave and the meta server (the slave
// takes over, the client still reaches the old master); asymmetric (the realtime master's frames to its slave dropped,
// the meta server's frames to the delay master dropped); both masters
// behind a 200 ms, 5 % loss link. Cuts are silent (ARP entries pointed
// nowhere), the slow link is netlab's forwarder.
//
//	partition_lost_acked        acknowledged sends never consumed (target 0)
//	partition_dual_master_acks  probe writes one broker acknowledged while
//	                            its rival was acknowledging (target 0)
//	partition_early_delayed     delayed messages handled early (target 0)
//	partition_heal_recovery_s   the worst cut's slowest group, heal to its
//	                            first acknowledged write (target ≤ 2)
//	partition_rejoin_s          the worst cut's heal to both groups paired
//	                            again (a master and its eligible slave)
//	partition_max_stall_s       the longest time, cut to recovery, a group
//	                            acknowledged no routed send

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/qmq-go/qmq/scripts/netlab"
	"github.com/qmq-go/qmq/scripts/netlab/partition"
)

func init() {
	register("partition", runPartition)
	registerWorker("partition-client", func(args []string) (any, error) {
		return nil, partition.ClientMain(args)
	})
}

func runPartition(env *Env) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// scripts/bench.sh builds no meta server binary (the other suites run
	// it in process); build it beside the others (bench.sh runs us from the
	// repository's root).
	build := exec.Command("go", "build", "-o", filepath.Join(env.Bin, "qmq-metaserver"), "./metaserver/cmd/qmq-metaserver")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build qmq-metaserver: %v: %s", err, out)
	}
	// QMQ_PARTITION_SCENARIOS (comma-separated) runs a subset.
	var scenarios []string
	if v := os.Getenv("QMQ_PARTITION_SCENARIOS"); v != "" {
		scenarios = strings.Split(v, ",")
	}
	res, err := partition.Run(partition.Options{
		Bin:       env.Bin,
		Dir:       env.Dir,
		Client:    []string{self, "worker", "partition-client"},
		Delay:     true,
		Scenarios: scenarios,
		Logf:      env.Logf,
	})
	if errors.Is(err, netlab.ErrUnsupported) {
		env.Logf("partition: skipped: %v", err)
		return nil
	}
	if err != nil {
		return err
	}
	var rejoin, stall time.Duration
	var failed []string
	for _, s := range res.Scenarios {
		if s.Err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", s.Name, s.Err))
		}
		rejoin = max(rejoin, s.Rejoin)
		for _, d := range s.Stall {
			stall = max(stall, d)
		}
		env.Logf("%s: slowest group back in %.3f s, paired again in %.3f s; longest stall per group %v", s.Name, s.Slowest().Seconds(), s.Rejoin.Seconds(), s.Stall)
	}
	env.Logf("%d sends acknowledged; failed sends by kind %v", res.Acked, res.FailedSends)
	env.Metric("partition_lost_acked", float64(res.LostAcked), "messages")
	env.Metric("partition_dual_master_acks", float64(res.DualMasterAcks), "messages")
	env.Metric("partition_early_delayed", float64(res.EarlyDelayed), "messages")
	env.Metric("partition_heal_recovery_s", res.HealRecovery.Seconds(), "s")
	env.Metric("partition_rejoin_s", rejoin.Seconds(), "s")
	env.Metric("partition_max_stall_s", stall.Seconds(), "s")
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}
