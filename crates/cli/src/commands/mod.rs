//! One module per subcommand. Each has `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod ask;
pub mod chunk;
pub mod config;
pub mod embed;
pub mod eval;
pub mod get;
pub mod ingest;
pub mod mcp;
pub mod migrate;
pub mod model;
pub mod pack;
pub mod rm;
pub mod runs;
pub mod serve;
pub mod split;
pub mod status;
