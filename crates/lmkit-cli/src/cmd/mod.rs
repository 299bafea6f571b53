//! One module per subcommand.
pub mod classify;
pub mod embed;
pub mod fill_mask;
pub mod qa;
