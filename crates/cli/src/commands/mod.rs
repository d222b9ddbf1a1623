//! One module per subcommand. Each has `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod bench;
pub mod chunk;
pub mod model;
pub mod pack;
pub mod split;
