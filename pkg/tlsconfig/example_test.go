package tlsconfig_test

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"

	"github.com/qmq-go/qmq/pkg/auth"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/pkg/tlsconfig/pki"
)

// A server that verifies client certificates when given, and a client
// that presents one; the files would come from scripts/certs.
func Example() {
	dir, _ := os.MkdirTemp("", "tls-example-")
	defer os.RemoveAll(dir)
	files := writeExampleFiles(dir)

	serverCfg, err := tlsconfig.Server(tlsconfig.Files{CA: files["ca"], Cert: files["server"], Key: files["server-key"]}, false,
		tlsconfig.OnReloadError(func(err error) { log.Print(err) })) // a replaced file that cannot be used
	if err != nil {
		log.Fatal(err)
	}
	clientCfg, err := tlsconfig.Client(tlsconfig.Files{CA: files["ca"], Cert: files["app"], Key: files["app-key"]}, "localhost")
	if err != nil {
		log.Fatal(err)
	}

	ln, _ := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			_ = nc.(*tls.Conn).Handshake()
			nc.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	conn, err := tls.Dial("tcp", net.JoinHostPort("localhost", port), clientCfg)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	fmt.Println("server verified as", conn.ConnectionState().PeerCertificates[0].DNSNames[0])
	// Output: server verified as localhost
}

// The flags of a server's listeners.
func ExampleFiles_AddFlags() {
	var files tlsconfig.Files
	fs := flag.NewFlagSet("qmq-realtime", flag.ContinueOnError)
	files.AddFlags(fs, "tls-", "this server's")
	_ = fs.Parse([]string{"--tls-ca", "data/tls/ca.pem", "--tls-cert", "data/tls/broker-rt1.pem", "--tls-key", "data/tls/broker-rt1-key.pem"})
	fmt.Println(files.CA, files.Cert, files.Key)
	// Output: data/tls/ca.pem data/tls/broker-rt1.pem data/tls/broker-rt1-key.pem
}

// writeExampleFiles makes a CA, a server certificate for localhost and a
// client certificate of app:demo under dir.
func writeExampleFiles(dir string) map[string]string {
	ca, _ := pki.NewCA("example CA", 0)
	serverCert, serverKey, _ := ca.Issue(pki.Leaf{Hosts: []string{"localhost"}, Server: true})
	appCert, appKey, _ := ca.Issue(pki.Leaf{Identity: auth.IdentityURI(auth.KindApp, "demo"), Client: true})
	files := map[string]string{}
	for name, b := range map[string][]byte{"ca": ca.CertPEM, "server": serverCert, "server-key": serverKey, "app": appCert, "app-key": appKey} {
		files[name] = filepath.Join(dir, name+".pem")
		_ = pki.WriteFile(files[name], b, 0o600)
	}
	return files
}
