package realtime

// SetNodePortPicker replaces how n picks a free port for a port-0 address
// (freePort); set it before Start.
func SetNodePortPicker(n *Node, pick func(addr string) (string, error)) { n.pickPort = pick }

// FreePort is freePort.
var FreePort = freePort
