// Package failover is a broker group's role loop, shared by realtime and
// delay groups: it registers a broker with the meta servers in its role,
// keeps a master's write gate (may it take and acknowledge a write now?),
// maintains the group's eligible set, and campaigns, takes over, promotes,
// demotes and hands over. Each server implements Server; each store keeps
// its own log shipping and reports it through SlaveWatch and CopyWatch.
//
// The rule: fence only where a rival can exist. A master must never
// acknowledge a write after another broker of its group became master, and
// must not stop writing for any other reason. The safety argument, case by
// case, is in the section "Safety" below (written out in stage D).
package failover
