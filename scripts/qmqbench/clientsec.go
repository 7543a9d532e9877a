package main

import (
	"flag"

	"github.com/qmq-go/qmq/consumer"
	"github.com/qmq-go/qmq/pkg/tlsconfig"
	"github.com/qmq-go/qmq/producer"
)

// clientSecurity is what a worker presents to a secure broker: -tls-ca (the
// broker's CA: talk TLS) and -credentials-file (name:secret, mode 0600).
type clientSecurity struct{ ca, credentials string }

func addClientSecurity(fs *flag.FlagSet) *clientSecurity {
	c := &clientSecurity{}
	fs.StringVar(&c.ca, "tls-ca", "", "CA of a TLS broker (empty: plaintext)")
	fs.StringVar(&c.credentials, "credentials-file", "", "credentials file (name:secret, mode 0600)")
	return c
}

func (c *clientSecurity) producer() ([]producer.Option, error) {
	var o []producer.Option
	if c.ca != "" {
		cfg, err := tlsconfig.Client(tlsconfig.Files{CA: c.ca}, "")
		if err != nil {
			return nil, err
		}
		o = append(o, producer.WithTLS(cfg))
	}
	if c.credentials != "" {
		o = append(o, producer.WithCredentialsFile(c.credentials))
	}
	return o, nil
}

func (c *clientSecurity) consumer() ([]consumer.Option, error) {
	var o []consumer.Option
	if c.ca != "" {
		cfg, err := tlsconfig.Client(tlsconfig.Files{CA: c.ca}, "")
		if err != nil {
			return nil, err
		}
		o = append(o, consumer.WithTLS(cfg))
	}
	if c.credentials != "" {
		o = append(o, consumer.WithCredentialsFile(c.credentials))
	}
	return o, nil
}
