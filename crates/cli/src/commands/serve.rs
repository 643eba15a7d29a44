use super::device::Device;
use super::{load_engine, CliResult, DraftArgs, EngineOptions};
use ishizuki_engine::EngineHandle;
use ishizuki_server::ServerConfig;
use std::net::IpAddr;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Model path or curated name (smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b).
    #[arg(short = 'm', long, default_value = "smollm2-135m")]
    model: String,
    /// Address to listen on; anything but loopback needs --api-key (or --insecure-no-auth).
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Key clients must send (`Authorization: Bearer KEY` or `x-api-key: KEY`); default: $ISHIZUKI_API_KEY.
    #[arg(long, env = "ISHIZUKI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Serve a non-loopback address without a key.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Context length per sequence (default: the model's, at most 4096).
    #[arg(long)]
    ctx: Option<usize>,
    /// Prefix-cache slots (default: as many as a quarter of free memory holds, 1 to 16).
    #[arg(long)]
    cache_slots: Option<usize>,
    /// Threads (default: all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// Where the model runs: auto (the GPU when this build has CUDA and one is there), cpu, cuda.
    #[arg(long, value_enum, default_value_t = Device::Auto, env = "ISHIZUKI_DEVICE")]
    device: Device,
    /// The model name clients use (default: the curated name or the file name).
    #[arg(long)]
    alias: Option<String>,
    /// Responses kept for `previous_response_id`.
    #[arg(long, default_value_t = 256)]
    response_store: usize,
    #[command(flatten)]
    draft: DraftArgs,
}

pub fn run(a: ServeArgs) -> CliResult {
    let config = ServerConfig {
        host: a.host,
        port: a.port,
        api_key: a.api_key.clone(),
        insecure_no_auth: a.insecure_no_auth,
        response_store_entries: a.response_store,
    };
    let options = EngineOptions {
        ctx: a.ctx,
        cache_slots: a.cache_slots,
        alias: a.alias.clone(),
        draft: a.draft.clone(),
        quiet: false,
        device: a.device,
    };
    let (model, threads) = (a.model.clone(), a.threads);
    let load = Box::new(move || {
        let engine = load_engine(&model, threads, &options).map_err(|e| e.to_string())?;
        Ok(EngineHandle::spawn(engine))
    });
    ishizuki_server::run(config, load)?;
    Ok(())
}
