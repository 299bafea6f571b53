//! One module per subcommand.

pub mod plot;
pub mod pretrain;
