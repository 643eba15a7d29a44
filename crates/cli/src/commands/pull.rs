use super::CliResult;
use ishizuki::fetch::{curated_names, resolve_model};

#[derive(clap::Args)]
pub struct PullArgs {
    /// Curated model names (default: all of them).
    names: Vec<String>,
}

pub fn run(a: PullArgs) -> CliResult {
    let names = if a.names.is_empty() {
        curated_names().into_iter().map(String::from).collect()
    } else {
        a.names
    };
    for name in names {
        let path = resolve_model(&name)?;
        println!("{name}\t{}", path.display());
    }
    Ok(())
}
