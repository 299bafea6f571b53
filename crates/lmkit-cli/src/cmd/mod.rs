//! One module per subcommand.

pub mod plot;
