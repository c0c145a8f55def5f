//! Prints the most probable next tokens after a text, then streams a sampled continuation.
//! The stubs are generated from the repository's proto/ at build time (build.rs). Run:
//!     cargo run -- --text "Once upon a time"

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tonic::transport::Endpoint;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::{Code, Request, Status};

mod pb {
    tonic::include_proto!("attnserve.v1");
}
use pb::generate_request::SamplingSeed;
use pb::generate_response::Event;
use pb::inference_client::InferenceClient;
use pb::sequence::Input;
use pb::{GenerateRequest, NextTokenRequest, Sequence};

const TOP_K: i32 = 5;
const MAX_TOKENS: i32 = 40;
const TEMPERATURE: f32 = 0.8;
const SEED: u64 = 1; // the same seed gives the same continuation
const TIMEOUT: Duration = Duration::from_secs(30);

/// The most probable next tokens after a text, then a sampled continuation.
#[derive(Parser)]
struct Args {
    /// the server's host:port
    #[arg(long, default_value = "localhost:50051")]
    target: String,
    #[arg(long, default_value = "demo")]
    model: String,
    #[arg(long, default_value = "The meaning of life is")]
    text: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(status) => {
            // e.g. NOT_FOUND for an unknown model, UNAVAILABLE if no server
            eprintln!("error: {}: {}", code_name(status.code()), status.message());
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Status> {
    let channel = Endpoint::from_shared(format!("http://{}", args.target))
        .map_err(|error| Status::invalid_argument(format!("--target {}: {error}", args.target)))?
        .connect_lazy(); // connects at the first call, whose status then says if it could not
    let mut client = InferenceClient::new(channel);
    // A server started with --api_key wants the key with every call.
    let authorization: Option<MetadataValue<Ascii>> = match std::env::var("ATTNSERVE_API_KEY") {
        Ok(key) if !key.is_empty() => Some(
            format!("Bearer {key}")
                .parse()
                .map_err(|_| Status::invalid_argument("ATTNSERVE_API_KEY is not ASCII"))?,
        ),
        _ => None,
    };
    let prompt = Sequence {
        input: Some(Input::Text(args.text.clone())),
    };

    let mut request = Request::new(NextTokenRequest {
        model: args.model.clone(),
        sequences: vec![prompt.clone()],
        top_k: TOP_K,
        ..Default::default()
    });
    request.set_timeout(TIMEOUT);
    if let Some(value) = &authorization {
        request.metadata_mut().insert("authorization", value.clone());
    }
    let reply = client.next_token(request).await?.into_inner();
    println!("Top {TOP_K} next tokens after {}:", quote(&args.text));
    println!("{:>5}  {:<10}  probability", "id", "token");
    // One result per sequence, most probable first.
    for token in &reply.results[0].top {
        // JSON quoting makes spaces, newlines and control bytes visible.
        let text = quote(&token.text);
        println!("{:>5}  {text:<10}  {:.6}", token.id, token.probability);
    }

    println!("\nGenerating {MAX_TOKENS} tokens (temperature {TEMPERATURE}, seed {SEED}):");
    print!("{}", args.text);
    io::stdout().flush().ok();
    let mut request = Request::new(GenerateRequest {
        model: args.model,
        prompt: Some(prompt),
        max_tokens: MAX_TOKENS,
        temperature: TEMPERATURE,
        sampling_seed: Some(SamplingSeed::Seed(SEED)),
        ..Default::default()
    });
    request.set_timeout(TIMEOUT);
    if let Some(value) = authorization {
        request.metadata_mut().insert("authorization", value);
    }
    // Tokens arrive as they are sampled; the last message says why generation stopped.
    let mut stream = client.generate(request).await?.into_inner();
    while let Some(response) = stream.message().await? {
        match response.event {
            Some(Event::Token(token)) => {
                print!("{}", token.text);
                io::stdout().flush().ok();
            }
            Some(Event::Finish(finish)) => {
                println!("\nfinish reason: {}", finish.reason().as_str_name());
            }
            None => {}
        }
    }
    Ok(())
}

/// JSON quoting as Python's json.dumps(text, ensure_ascii=False) does it: non-ASCII text stays.
fn quote(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            '\u{8}' => quoted.push_str("\\b"),
            '\u{c}' => quoted.push_str("\\f"),
            c if c < ' ' => write!(quoted, "\\u{:04x}", c as u32).unwrap(),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// The status code's canonical name, as the other gRPC libraries print it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
