// Package netlab builds a lab of Linux network namespaces on one machine so
// that servers can be partitioned from each other the way a real network
// partitions them: silently, one way or both, or through a slow lossy link.
// The partition suite (scripts/qmqbench) and the partition tests use it.
//
// # Model
//
// A Lab is a set of named hosts. Each host is a network namespace with a
// loopback and one interface, eth0, holding one address of the lab's /24;
// the other end of its veth pair sits in the lab's switch namespace and is a
// port of a bridge there. Nothing is added to the caller's own namespace:
// the controller reaches a host through Dial/HTTPClient (a socket made on a
// thread moved into the host's namespace) and runs programs in it with
// Command (ip netns exec).
//
//	host "a" ns          switch ns ("qnl<N>-sw")          host "b" ns
//	lo, eth0 10.213.N.1 ── q<N>s1 ─┐            ┌─ q<N>s2 ── eth0 10.213.N.2
//	                               └─ br0 ──────┘
//
// Names. Every namespace is "qnl<N>-<host>" (host names are [a-z0-9]{1,8})
// and "qnl<N>-sw", where N (1..250) is the lab's number, also the third
// byte of its subnet 10.213.N.0/24. A lab writes its owner's pid to
// /run/qmq-netlab/<N>.pid. New first removes every lab whose owner is not
// running any more (a crashed earlier run): it kills the processes left in
// its namespaces and deletes them. Close deletes the lab's own.
//
// # Cuts
//
// Cut(from, to) points from's ARP entry for to's address at a MAC address no
// interface has (02:00:00:00:de:ad, permanent): the bridge floods the frames
// and nobody takes them. Nothing tells the sender — no RST, no ICMP, no
// error from send — as when a switch or a firewall drops packets. It is one
// way: to's frames still reach from (a TCP handshake fails both ways, but
// a connection's data flowing to → from still arrives, and its acks don't).
// CutBoth cuts both ways; Heal(a, b) heals both ways (the ARP entry is
// deleted and resolved again on the next frame); HealAll heals every cut.
// Isolate takes a host's switch port down (every peer at once).
//
// # Slow links
//
// Slow(host, delay, loss) takes the host's switch port off the bridge and
// puts a forwarder of ours between them: two AF_PACKET sockets in the
// switch namespace, one on the host's port and one on a new veth pair whose
// other end joins the bridge. Each frame, in each direction, is dropped
// with probability loss or sent on delay later, in order (a host's round
// trip to anyone grows by 2×delay). The sockets use PACKET_VNET_HDR, so a
// GSO frame or one whose checksum the kernel left to offload goes through
// as it came (a dropped GSO frame is several segments). Frames queue up to
// SlowQueue per direction; more are dropped. Unslow restores the port.
//
// # Requirements
//
// Root (CAP_NET_ADMIN, CAP_SYS_ADMIN), iproute2's ip, and a kernel with
// network namespaces, veth and bridge. New returns an error wrapping
// ErrUnsupported when they are missing; tests skip on it. No sch_netem and
// no iptables are needed.
package netlab
