// Package otlp builds an OpenTelemetry tracer provider that exports over
// OTLP (gRPC) from the standard OTEL_* environment variables, for the
// servers' mains and for applications (pkg/tracing says what is traced).
package otlp

import (
	"context"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// FromEnvironment returns a tracer provider exporting over OTLP (gRPC) as
// the standard variables say (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG, OTEL_SERVICE_NAME, …), and its shutdown; nil
// (tracing off) unless OTEL_TRACES_EXPORTER is otlp or an OTLP endpoint is
// set, or when OTEL_SDK_DISABLED is true.
func FromEnvironment(ctx context.Context) (trace.TracerProvider, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, none, nil
	}
	exporter := strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER"))
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") + os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if exporter != "otlp" && (exporter != "" || endpoint == "") {
		return nil, none, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, none, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	return tp, tp.Shutdown, nil
}
