//! The histograms of each model request: its duration, time to first token and per output token, its tokens,
//! and the gateway's own time (OpenTelemetry's advised buckets for the GenAI ones).

use super::register::Registrar;
use prometheus::HistogramVec;

/// The GenAI labels of a request: operation, alias, provider.
const GENAI: &[&str] = &["gen_ai_operation_name", "gen_ai_request_model", "gen_ai_provider_name"];

/// OpenTelemetry's advised buckets for `gen_ai.server.request.duration` (seconds).
const DURATION: &[f64] = &[0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
/// OpenTelemetry's advised buckets for `gen_ai.server.time_to_first_token` (seconds).
const TTFT: &[f64] = &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0];
/// OpenTelemetry's advised buckets for `gen_ai.server.time_per_output_token` (seconds).
const TPOT: &[f64] = &[0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5];
/// OpenTelemetry's advised buckets for `gen_ai.client.token.usage` (tokens).
const TOKENS: &[f64] =
    &[1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0];
/// The gateway's own time per request (seconds): 10 µs to 100 ms.
const OVERHEAD: &[f64] = &[0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.1];

/// The histograms of a request, registered in the gateway's registry.
#[derive(Debug)]
pub(super) struct Timings {
    pub(super) duration: HistogramVec,
    pub(super) ttft: HistogramVec,
    pub(super) tpot: HistogramVec,
    pub(super) tokens: HistogramVec,
    pub(super) overhead: HistogramVec,
}

impl Timings {
    /// Every histogram, registered in `r`.
    pub(super) fn new(r: &mut Registrar) -> Result<Timings, prometheus::Error> {
        let tokens_labels = [GENAI, &["gen_ai_token_type"]].concat();
        Ok(Timings {
            duration: r.histograms(
                "gen_ai_server_request_duration_seconds",
                "Time from a model request's arrival to the end of its answer (of its stream).",
                GENAI,
                DURATION,
            )?,
            ttft: r.histograms(
                "gen_ai_server_time_to_first_token_seconds",
                "Time from a streamed request's arrival to its answer's first byte.",
                GENAI,
                TTFT,
            )?,
            tpot: r.histograms(
                "gen_ai_server_time_per_output_token_seconds",
                "Time per output token of a streamed answer after its first byte.",
                GENAI,
                TPOT,
            )?,
            tokens: r.histograms(
                "gen_ai_client_token_usage",
                "Tokens per model request, by type (input, output).",
                &tokens_labels,
                TOKENS,
            )?,
            overhead: r.histograms(
                "svc_gateway_overhead_seconds",
                "Time in the gateway not spent waiting for an upstream, until the answer's first byte.",
                &["api"],
                OVERHEAD,
            )?,
        })
    }
}
